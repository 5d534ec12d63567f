-- The session's last turn (API.md §4 `lastTurn`), mirrored on the row by whoever writes a turn/end, so
-- that the session object and the list never scan the log: {"turn", "reason", "time"} as JSON text,
-- NULL before the first turn ends. Existing sessions get it from their logs' latest turn/end.

ALTER TABLE sessions ADD COLUMN last_turn text;

UPDATE sessions s
SET last_turn = json_build_object('turn', (e.body::json -> 'data' ->> 'turn')::integer, 'reason', e.body::json -> 'data' -> 'reason', 'time', e.time)::text
FROM (
  SELECT DISTINCT ON (session_key) session_key, time, body
  FROM session_events
  WHERE type = 'turn/end'
  ORDER BY session_key, seq DESC
) e
WHERE e.session_key = s.key;
