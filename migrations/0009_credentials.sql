-- Credentials for browsers and end users (API.md §18): the keys agentd signs its tokens with, a
-- tenant's own identity provider and allowed origins, and the subject that owns a session.

-- Signing keys (Ed25519). The public half is a JWK as served by /.well-known/jwks.json; the private
-- half is a JWK sealed with AES-256-GCM under AGENTD_SECRET_KEY, as tenant secrets are (its tag
-- appended to the ciphertext, the kid as additional data). A key signs until retire_at and verifies
-- until expires_at (retire_at plus the longest token lifetime), when it is deleted.
CREATE TABLE signing_keys (
  kid         text PRIMARY KEY,
  public_jwk  text NOT NULL,
  nonce       bytea NOT NULL,
  ciphertext  bytea NOT NULL,
  created_at  bigint NOT NULL,
  retire_at   bigint NOT NULL,
  expires_at  bigint NOT NULL
);

-- A tenant's identity provider (all four set, or none) and the origins its browsers may call from
-- (a JSON array of origins; NULL: the deployment's AGENTD_CORS_ORIGINS). An issuer and audience pair
-- names one tenant, so an end-user token leads to exactly one.
ALTER TABLE tenants
  ADD COLUMN auth_issuer text,
  ADD COLUMN auth_audience text,
  ADD COLUMN auth_jwks_url text,
  ADD COLUMN auth_subject_claim text,
  ADD COLUMN cors_origins text;
CREATE UNIQUE INDEX tenants_by_issuer ON tenants (auth_issuer, auth_audience) WHERE auth_issuer IS NOT NULL;

-- The subject that created a session (API.md §4 owner); NULL for sessions created with a tenant key
-- or a token without a subject. A subject's list is read by this index.
ALTER TABLE sessions ADD COLUMN owner text;
CREATE INDEX sessions_by_owner ON sessions (tenant_id, owner, updated_at DESC, key DESC) WHERE owner IS NOT NULL;
