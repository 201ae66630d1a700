import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * WebhookHeaders are a request's headers: node:http's
 * `IncomingHttpHeaders` (lower-case names), a fetch `Headers`, or any
 * record of names (any case) to values.
 */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** WebhookOptions tunes verifyWebhook. */
export interface WebhookOptions {
  /** How far webhook-timestamp may be from now, either way, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The clock, in milliseconds since the epoch (default Date.now). */
  now?: () => number;
}

/** VerifiedWebhook is what verifyWebhook vouches for. */
export interface VerifiedWebhook {
  /** webhook-id: the message's ID, the same on every retry of it; use it to ignore repeats. */
  id: string;
  /** webhook-timestamp: when the message was sent, in seconds since the epoch. */
  timestamp: number;
  /** The body, as signed. */
  body: string;
}

/** WebhookVerificationError says why a webhook is not to be trusted. */
export class WebhookVerificationError extends Error {
  override readonly name = "WebhookVerificationError";
}

const defaultToleranceSeconds = 5 * 60;
const secretPrefix = "whsec_";

/**
 * verifyWebhook checks a webhook signed as Standard Webhooks specify, and
 * returns its id, timestamp and body; it throws a WebhookVerificationError
 * when the webhook is not to be trusted.
 *
 * secret is the endpoint's signing secret, `whsec_` and base64 (a bare
 * base64 secret is accepted too). headers must carry webhook-id,
 * webhook-timestamp (Unix seconds, within options.toleranceSeconds of
 * now, 5 minutes by default, so that an old message cannot be replayed)
 * and webhook-signature: one or more space-separated `v1,<base64>`, each
 * an HMAC-SHA256 of `${id}.${timestamp}.${body}`; one matching signature
 * suffices (several are sent while a secret is rotated) and signatures of
 * other versions are ignored. body must be the raw body as received, not
 * JSON parsed and encoded again.
 */
export function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: string | Uint8Array,
  options: WebhookOptions = {},
): VerifiedWebhook {
  const key = secretKey(secret);
  const id = header(headers, "webhook-id");
  const timestampText = header(headers, "webhook-timestamp");
  const signatures = header(headers, "webhook-signature");
  if (!id || !timestampText || !signatures) {
    throw new WebhookVerificationError("webhook: missing webhook-id, webhook-timestamp or webhook-signature");
  }
  const timestamp = checkTimestamp(timestampText, options);
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const expected = createHmac("sha256", key).update(`${id}.${timestampText}.`).update(payload).digest();
  for (const signature of signatures.split(" ")) {
    const [version, encoded] = splitOnce(signature, ",");
    if (version !== "v1" || encoded === undefined) {
      continue;
    }
    const given = Buffer.from(encoded, "base64");
    if (given.length === expected.length && timingSafeEqual(given, expected)) {
      return { id, timestamp, body: payload.toString("utf8") };
    }
  }
  throw new WebhookVerificationError("webhook: no matching v1 signature");
}

/** secretKey returns the HMAC key of a `whsec_<base64>` secret. */
function secretKey(secret: string): Buffer {
  const encoded = secret.startsWith(secretPrefix) ? secret.slice(secretPrefix.length) : secret;
  const key = Buffer.from(encoded, "base64");
  if (key.length === 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) {
    throw new WebhookVerificationError("webhook: the secret must be whsec_ followed by base64");
  }
  return key;
}

/** checkTimestamp parses webhook-timestamp and checks it is within the tolerance of now. */
function checkTimestamp(text: string, options: WebhookOptions): number {
  if (!/^[0-9]{1,12}$/.test(text)) {
    throw new WebhookVerificationError("webhook: webhook-timestamp must be Unix seconds");
  }
  const timestamp = Number(text);
  const tolerance = options.toleranceSeconds ?? defaultToleranceSeconds;
  const nowSeconds = Math.floor((options.now ?? Date.now)() / 1000);
  if (timestamp < nowSeconds - tolerance) {
    throw new WebhookVerificationError("webhook: the timestamp is too old");
  }
  if (timestamp > nowSeconds + tolerance) {
    throw new WebhookVerificationError("webhook: the timestamp is too far in the future");
  }
  return timestamp;
}

/** header returns the first value of a header, by its name in any case. */
function header(headers: WebhookHeaders, name: string): string {
  if (headers instanceof Headers) {
    return headers.get(name)?.trim() ?? "";
  }
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() === name) {
      return (Array.isArray(v) ? v[0] ?? "" : v ?? "").trim();
    }
  }
  return "";
}

function splitOnce(s: string, sep: string): [string, string | undefined] {
  const i = s.indexOf(sep);
  return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + sep.length)];
}
