// The webhooks door (API.md §14): the tenant's webhooks, the deliverer of the outbox that store/
// fills inside each triggering commit, and the Standard Webhooks signature.
export { WebhookService, type WebhookObject, type DeliveryObject, type WebhookServiceDeps } from './service.js'
export { Deliverer, DEFAULT_DELIVERER, deliveryBody, nextAttemptAt, type DelivererOptions, type DelivererDeps } from './deliverer.js'
export { sign, newSecret } from './sign.js'
