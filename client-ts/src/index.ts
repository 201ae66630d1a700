// Tollgate's TypeScript SDK: a client of the check API (POST /v1/check)
// with fail modes and remembered denials, Connect/Express middleware that
// protects a service with it, and verification of Tollgate's webhooks.
// It has no runtime dependencies.
export { TollgateClient, defaultMemorySize, defaultTimeoutMs, maxKeyLength, type ClientOptions, type FailMode } from "./client.js";
export {
  Reason, rateLimitHeaders,
  type CheckRequest, type Decision, type RuleResult, type Lease, type LeaseRequest, type SettleRequest, type Settlement, type WireCheckRequest, type WireDecision,
  type Standing, type RuleStanding, type QuotaStanding, type CreditsStanding,
} from "./decision.js";
export { maxMemoryAgeMs } from "./memory.js";
export { ProblemError, type Problem } from "./problem.js";
export {
  apiKey, costHeader, decisionOf, middleware, remoteAddress, reportCost, writeDenied,
  type Middleware, type MiddlewareOptions, type Next, type RefundOutcome,
} from "./middleware.js";
export { cleanPath, requestResource, routesCaseSensitively, type ExpressLike, type ResourceOptions } from "./resource.js";
export { verifyWebhook, WebhookVerificationError, type VerifiedWebhook, type WebhookHeaders, type WebhookOptions } from "./webhook.js";
export type { components } from "./openapi.js";
