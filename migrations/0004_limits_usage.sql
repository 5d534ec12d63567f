-- Tenant limits, the usage ledger and running-session slots (API.md §15). Existing data is carried
-- over: usage from the settlements in the logs, slots from open turns, wake order from run state.

-- Limits: NULL is no limit.
ALTER TABLE tenants
  ADD COLUMN max_running_sessions integer CHECK (max_running_sessions > 0),
  ADD COLUMN tokens_per_day bigint CHECK (tokens_per_day > 0),
  ADD COLUMN cost_usd_per_month double precision CHECK (cost_usd_per_month > 0),
  ADD COLUMN requests_per_min integer CHECK (requests_per_min > 0);

-- What every settled attempt (assistant/message, assistant/attempt, compaction/summary) used, by
-- tenant, UTC day of its settlement, model and session; written with the settlement. It outlives its
-- session (no foreign key to sessions): usage stays billed after a session is deleted.
CREATE TABLE usage_ledger (
  tenant_id          uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  day                date NOT NULL,
  model              text NOT NULL,
  session_key        uuid NOT NULL,
  session_id         text NOT NULL,
  input_tokens       bigint NOT NULL DEFAULT 0,
  output_tokens      bigint NOT NULL DEFAULT 0,
  cache_read_tokens  bigint NOT NULL DEFAULT 0,
  cache_write_tokens bigint NOT NULL DEFAULT 0,
  cost_usd           double precision NOT NULL DEFAULT 0,
  attempts           integer NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, day, model, session_key)
);

-- The budget's view of the ledger: one row per tenant and period, 'YYYY-MM-DD' (a UTC day) or
-- 'YYYY-MM' (a UTC month), so the check before a model attempt reads rows by primary key.
CREATE TABLE usage_totals (
  tenant_id uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  period    text NOT NULL,
  tokens    bigint NOT NULL DEFAULT 0,
  cost_usd  double precision NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, period)
);

-- A slot per session that runs a turn: taken with turn/start, freed with turn/end (crash repair's
-- too). maxRunningSessions bounds a tenant's slots across processes.
CREATE TABLE running_slots (
  session_key uuid PRIMARY KEY REFERENCES sessions(key) ON DELETE CASCADE,
  tenant_id   uuid NOT NULL,
  taken_at    bigint NOT NULL
);
CREATE INDEX running_slots_by_tenant ON running_slots (tenant_id);

-- Wake order: drawn when a session's run state leaves idle; sessions waiting for a slot start in it.
CREATE SEQUENCE session_wake_seq;
ALTER TABLE sessions ADD COLUMN wake_seq bigint;
CREATE INDEX sessions_waking ON sessions (tenant_id, wake_seq) WHERE run_state IN ('wanted', 'running');

-- ---- carrying existing data over ----

INSERT INTO running_slots (session_key, tenant_id, taken_at)
  SELECT key, tenant_id, updated_at FROM sessions WHERE open_turn IS NOT NULL;

UPDATE sessions s SET wake_seq = o.n
  FROM (SELECT key, row_number() OVER (ORDER BY updated_at, key) AS n FROM sessions WHERE run_state <> 'idle') o
  WHERE s.key = o.key;
SELECT setval('session_wake_seq', coalesce((SELECT max(wake_seq) FROM sessions), 0) + 1, false);

-- Usage from the logs. A fork's log starts with a copy of its source's events up to its first
-- session/end-seed (API.md §9): that usage was spent by the source and is not counted again.
WITH settled AS (
  SELECT s.tenant_id, s.key, s.id, e.seq, e.time, e.type, e.body::jsonb -> 'data' AS d
  FROM session_events e JOIN sessions s ON s.key = e.session_key
  WHERE e.type IN ('assistant/message', 'assistant/attempt', 'compaction/summary')
    AND NOT (
      s.create_hash = encode(sha256(convert_to('fork:' || s.id, 'UTF8')), 'hex')
      AND e.seq < coalesce((SELECT min(x.seq) FROM session_events x WHERE x.session_key = s.key AND x.type = 'session/end-seed'), 2147483647)
    )
), measured AS (
  SELECT tenant_id, key, id, time,
    CASE type
      WHEN 'assistant/message' THEN (d -> 'message' -> 'source' ->> 'provider') || '/' || (d -> 'message' -> 'source' ->> 'model')
      WHEN 'compaction/summary' THEN (d ->> 'provider') || '/' || (d ->> 'model')
      -- a failed attempt names no model: the request header it was sent under does
      ELSE (SELECT (h.body::jsonb -> 'data' -> 'header' -> 'config' ->> 'provider') || '/' || (h.body::jsonb -> 'data' -> 'header' -> 'config' ->> 'model')
            FROM session_events h WHERE h.session_key = settled.key AND h.type = 'request/header' AND h.seq < settled.seq ORDER BY h.seq DESC LIMIT 1)
    END AS model,
    CASE type
      -- a failed attempt's usage is the last usage chunk of its stream
      WHEN 'assistant/attempt' THEN (SELECT r -> 'chunk' -> 'usage' FROM jsonb_array_elements(d -> 'stream') WITH ORDINALITY AS x(r, n)
                                     WHERE r ->> 'type' = 'chunk' AND r -> 'chunk' ->> 'type' = 'usage' ORDER BY n DESC LIMIT 1)
      ELSE d -> 'usage'
    END AS u
  FROM settled
)
INSERT INTO usage_ledger (tenant_id, day, model, session_key, session_id, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, attempts)
  SELECT tenant_id, (to_timestamp(time / 1000.0) AT TIME ZONE 'UTC')::date, coalesce(model, 'unknown'), key, id,
    sum(round(coalesce((u ->> 'inputTokens')::numeric, 0)))::bigint,
    sum(round(coalesce((u ->> 'outputTokens')::numeric, 0)))::bigint,
    sum(round(coalesce((u ->> 'cacheReadTokens')::numeric, 0)))::bigint,
    sum(round(coalesce((u ->> 'cacheWriteTokens')::numeric, 0)))::bigint,
    sum(coalesce((u ->> 'costUsd')::double precision, 0)),
    count(*)
  FROM measured
  GROUP BY 1, 2, 3, 4, 5;

INSERT INTO usage_totals (tenant_id, period, tokens, cost_usd)
  SELECT l.tenant_id, p.period, sum(l.input_tokens + l.output_tokens + l.cache_read_tokens + l.cache_write_tokens), sum(l.cost_usd)
  FROM usage_ledger l, LATERAL (VALUES (to_char(l.day, 'YYYY-MM-DD')), (to_char(l.day, 'YYYY-MM'))) AS p(period)
  GROUP BY l.tenant_id, p.period;
