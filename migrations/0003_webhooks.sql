-- Webhooks (API.md §14): a tenant's subscriptions, the delivery outbox and its attempts. A delivery
-- row is written by store/ in the transaction of the event it reports (DESIGN.md §3 side rows), so a
-- committed turn/end always has its deliveries and a rolled-back one never does.

CREATE TABLE webhooks (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  url         text NOT NULL,
  events      text[] NOT NULL,
  description text,
  -- the signing secret as shown once at creation: whsec_ + base64 of the HMAC key
  secret      text NOT NULL,
  created_at  bigint NOT NULL
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant_id, created_at DESC, id DESC);

-- The outbox. The body is composed from these columns at each attempt, the same on every retry.
-- No foreign key to sessions: a turn that ended is reported even when its session is deleted next.
-- Deleting the webhook drops its deliveries (ON DELETE CASCADE).
CREATE TABLE webhook_deliveries (
  id               text PRIMARY KEY,
  webhook_id       uuid NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  type             text NOT NULL,
  session_id       text,
  turn             integer,
  seq              integer,
  -- reason / pending of the body's data, as JSON text
  extra            text NOT NULL DEFAULT '{}',
  event_time       bigint NOT NULL,
  created_at       bigint NOT NULL,
  status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
  -- attempts started; a claim takes the next number, so two attempts never share one
  attempts         integer NOT NULL DEFAULT 0,
  first_attempt_at bigint,
  -- due time while pending; a claim moves it past the attempt's timeout, so a crashed attempt comes due again
  next_attempt_at  bigint,
  last_status      integer,
  last_error       text,
  delivered_at     bigint
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_delivered ON webhook_deliveries (delivered_at) WHERE status = 'delivered';

-- One row per attempt: the answer's status (NULL when none came) and a short error text.
CREATE TABLE webhook_attempts (
  delivery_id  text NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
  attempt      integer NOT NULL,
  started_at   bigint NOT NULL,
  duration_ms  integer NOT NULL,
  status       integer,
  error        text,
  PRIMARY KEY (delivery_id, attempt)
);
