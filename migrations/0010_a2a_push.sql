-- A2A push-notification configs (API.md §17.4) are webhooks (API.md §14) filtered to one task. A
-- task is a span of a session's log; its end is the first turn end or required action of its
-- session, from the seq its span opened at and the turn it runs in (or, still queued, the first turn it
-- can run in). So a filtered webhook delivers only that first event, once: the columns say where the
-- task starts, and a webhook that has a delivery gets no other. Its signing secret is the config's
-- `token` (the client's, or one made and shown once), so the client verifies what it receives.
ALTER TABLE webhooks
  ADD COLUMN task_id text,
  ADD COLUMN task_session_key uuid,
  ADD COLUMN task_from_seq integer,
  ADD COLUMN task_min_turn integer;
CREATE INDEX webhooks_by_task ON webhooks (tenant_id, task_id) WHERE task_id IS NOT NULL;
