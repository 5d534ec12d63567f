-- Agents (API.md §16): a tenant's named, versioned session settings. The agent row is the name and its
-- latest version; every version is a row of its own that never changes once made, so a session keeps
-- the settings of the version it was created from. A delete only marks the agent (deleted_at): its
-- versions stay, for the sessions made from them, and its id then refuses new sessions.

CREATE TABLE agents (
  tenant_id     uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  id            text NOT NULL CHECK (id ~ '^[A-Za-z0-9_.-]{1,64}$'),
  -- the latest version, and the first one of this agent: versions of an id deleted and created again
  -- go on counting, so (id, version) names the same settings for as long as the tenant lives, and
  -- the deleted agent's versions stay out of reach
  version       integer NOT NULL,
  first_version integer NOT NULL DEFAULT 1,
  -- SHA-256 of the canonical create body (API.md §4 idempotent create)
  create_hash   text NOT NULL,
  created_at    bigint NOT NULL,
  deleted_at    bigint,
  PRIMARY KEY (tenant_id, id)
);
-- the list (newest first, keyset-paged) reads live agents only
CREATE INDEX agents_by_creation ON agents (tenant_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

CREATE TABLE agent_versions (
  tenant_id        uuid NOT NULL,
  agent_id         text NOT NULL,
  version          integer NOT NULL CHECK (version > 0),
  name             text NOT NULL,
  description      text,
  model            text NOT NULL,
  system           text NOT NULL DEFAULT '',
  tools            text NOT NULL DEFAULT '[]',
  mcp_servers      text NOT NULL DEFAULT '[]',
  max_tokens       integer,
  reasoning_effort text,
  metadata         text NOT NULL DEFAULT '{}',
  created_at       bigint NOT NULL,
  PRIMARY KEY (tenant_id, agent_id, version),
  FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id) ON DELETE CASCADE
);

-- The agent version a session was made from (API.md §4 `agent`); NULL for a session made inline. No
-- foreign key needed: an agent's versions are never removed while its tenant lives (a delete only marks it).
ALTER TABLE sessions ADD COLUMN agent_id text, ADD COLUMN agent_version integer;
