-- Tenant secrets (API.md §13) and a session's MCP servers (API.md §12).
-- A secret's value is stored only as AES-256-GCM ciphertext (with its tag appended) under a random
-- 12-byte nonce; the tenant and name are the additional data, so a row moved to another tenant or
-- name no longer decrypts.
CREATE TABLE secrets (
  tenant_id   uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  name        text NOT NULL,
  nonce       bytea NOT NULL,
  ciphertext  bytea NOT NULL,
  created_at  bigint NOT NULL,
  updated_at  bigint NOT NULL,
  PRIMARY KEY (tenant_id, name)
);

-- API.md §12: the session's MCP servers as JSON text, replaced as a whole by PATCH.
ALTER TABLE sessions ADD COLUMN mcp_servers text NOT NULL DEFAULT '[]';
