-- agentd schema, version 1. Every hot table is keyed by session first (DESIGN.md §5).

CREATE TABLE tenants (
  id          uuid PRIMARY KEY,
  name        text NOT NULL,
  created_at  bigint NOT NULL
);

-- API keys: the secret is shown once; we keep its prefix for lookup and a SHA-256 of the whole key.
CREATE TABLE api_keys (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  prefix      text NOT NULL UNIQUE,
  hash        bytea NOT NULL,
  created_at  bigint NOT NULL,
  revoked_at  bigint
);

CREATE TABLE sessions (
  key              uuid PRIMARY KEY,
  tenant_id        uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  id               text NOT NULL,
  title            text,
  model            text NOT NULL,
  system           text NOT NULL DEFAULT '',
  tools            text NOT NULL DEFAULT '[]',
  max_tokens       integer,
  reasoning_effort text,
  metadata         text NOT NULL DEFAULT '{}',
  create_hash      text NOT NULL,
  created_at       bigint NOT NULL,
  -- the log: next seq to allocate, time of the last event, the inbox projection of its splices
  next_seq         integer NOT NULL DEFAULT 0,
  last_time        bigint NOT NULL DEFAULT 0,
  updated_at       bigint NOT NULL,
  inbox            text NOT NULL DEFAULT '{"nextTurn":[],"nextStep":[]}',
  open_turn        integer,
  -- run state (SPEC §18.4) and the driver lease (DESIGN.md §3)
  run_state        text NOT NULL DEFAULT 'idle' CHECK (run_state IN ('idle', 'wanted', 'running', 'maintenance')),
  cancel_pending   boolean NOT NULL DEFAULT false,
  wake_latched     boolean NOT NULL DEFAULT false,
  lease_owner      text,
  lease_token      bigint NOT NULL DEFAULT 0,
  lease_expires_at bigint,
  -- usage ledger: sums of every settled attempt
  input_tokens       bigint NOT NULL DEFAULT 0,
  output_tokens      bigint NOT NULL DEFAULT 0,
  cache_read_tokens  bigint NOT NULL DEFAULT 0,
  cache_write_tokens bigint NOT NULL DEFAULT 0,
  cost_usd           double precision NOT NULL DEFAULT 0,
  UNIQUE (tenant_id, id)
);
CREATE INDEX sessions_by_activity ON sessions (tenant_id, updated_at DESC, key DESC);
-- what workers must take over: sessions with work or an open turn
CREATE INDEX sessions_claimable ON sessions (lease_expires_at) WHERE run_state <> 'idle' OR open_turn IS NOT NULL;

-- The durable log. `body` is the event exactly as it travels on the wire (API.md §6).
CREATE TABLE session_events (
  session_key uuid NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
  seq         integer NOT NULL,
  time        bigint NOT NULL,
  type        text NOT NULL,
  body        text NOT NULL,
  PRIMARY KEY (session_key, seq)
);

-- Idempotent deliveries (API.md §5): one record per client message id.
CREATE TABLE idempotency (
  session_key uuid NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
  message_id  text NOT NULL,
  route       text NOT NULL,
  body_hash   text NOT NULL,
  seq         integer NOT NULL,
  created_at  bigint NOT NULL,
  PRIMARY KEY (session_key, message_id)
);

-- Tool calls waiting for a client or an approver (SPEC §18.10).
CREATE TABLE pending_calls (
  session_key uuid NOT NULL REFERENCES sessions(key) ON DELETE CASCADE,
  call_id     text NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('client', 'approval')),
  name        text NOT NULL,
  arguments   text NOT NULL,
  answered    boolean NOT NULL DEFAULT false,
  answer      text,
  created_at  bigint NOT NULL,
  PRIMARY KEY (session_key, call_id)
);
