import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import { verifyWebhook, WebhookVerificationError } from "../src/index.js";

/**
 * sign returns the v1 signature of a message, computed with openssl when
 * it is installed (independently of the code under test), else with
 * Node's HMAC.
 */
function sign(secret: string, id: string, timestamp: string, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const content = `${id}.${timestamp}.${body}`;
  try {
    const mac = execFileSync("openssl", ["dgst", "-sha256", "-mac", "HMAC", "-macopt", `hexkey:${key.toString("hex")}`, "-binary"],
      { input: content, stdio: ["pipe", "pipe", "ignore"] });
    return "v1," + mac.toString("base64");
  } catch {
    return "v1," + createHmac("sha256", key).update(content).digest("base64");
  }
}

describe("verifyWebhook", () => {
  // The example of the Standard Webhooks specification.
  const published = {
    secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    headers: {
      "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
      "webhook-timestamp": "1614265330",
      "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    },
    body: '{"test": 2432232314}',
    now: () => 1614265330_000,
  };

  test("the specification's example", () => {
    const got = verifyWebhook(published.secret, published.headers, published.body, { now: published.now });
    assert.deepEqual(got, { id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1614265330, body: published.body });
  });

  const secret = "whsec_" + randomBytes(24).toString("base64");
  const now = 1_764_000_000_000;
  const timestamp = String(now / 1000);
  const body = JSON.stringify({ type: "usage.threshold", data: { tenant_id: "t", percent: 80, note: "ünïcode" } });
  const headers = (signature: string, ts = timestamp) => ({ "webhook-id": "msg_1", "webhook-timestamp": ts, "webhook-signature": signature });

  test("a signature computed independently, over a string or the raw bytes, with any header case", () => {
    const sig = sign(secret, "msg_1", timestamp, body);
    assert.equal(verifyWebhook(secret, headers(sig), body, { now: () => now }).id, "msg_1");
    assert.equal(verifyWebhook(secret, headers(sig), Buffer.from(body), { now: () => now }).body, body);
    assert.equal(verifyWebhook(secret, new Headers(headers(sig)), new TextEncoder().encode(body), { now: () => now }).timestamp, now / 1000);
    const upper = { "Webhook-Id": "msg_1", "WEBHOOK-TIMESTAMP": timestamp, "Webhook-Signature": [sig] };
    assert.equal(verifyWebhook(secret, upper, body, { now: () => now }).id, "msg_1");
    assert.equal(verifyWebhook(secret.slice("whsec_".length), headers(sig), body, { now: () => now }).id, "msg_1", "a bare base64 secret");
  });

  test("one matching signature among several (a rotated secret), other versions ignored", () => {
    const old = sign("whsec_" + randomBytes(24).toString("base64"), "msg_1", timestamp, body);
    const sig = sign(secret, "msg_1", timestamp, body);
    const signatures = `v1a,${sig.slice(3)} ${old} ${sig}`;
    assert.equal(verifyWebhook(secret, headers(signatures), body, { now: () => now }).id, "msg_1");
  });

  const refusals: [string, () => unknown, RegExp][] = [
    ["another secret", () => verifyWebhook("whsec_" + randomBytes(24).toString("base64"), headers(sign(secret, "msg_1", timestamp, body)), body, { now: () => now }), /no matching/],
    ["a changed body", () => verifyWebhook(secret, headers(sign(secret, "msg_1", timestamp, body)), body + " ", { now: () => now }), /no matching/],
    ["another id", () => verifyWebhook(secret, { ...headers(sign(secret, "msg_2", timestamp, body)) }, body, { now: () => now }), /no matching/],
    ["only a v1a signature", () => verifyWebhook(secret, headers("v1a," + sign(secret, "msg_1", timestamp, body).slice(3)), body, { now: () => now }), /no matching/],
    ["garbage signatures", () => verifyWebhook(secret, headers("v1 v1, ,,,"), body, { now: () => now }), /no matching/],
    ["too old", () => verifyWebhook(secret, headers(sign(secret, "msg_1", timestamp, body)), body, { now: () => now + 301_000 }), /too old/],
    ["too new", () => verifyWebhook(secret, headers(sign(secret, "msg_1", timestamp, body)), body, { now: () => now - 301_000 }), /future/],
    ["a timestamp that is not seconds", () => verifyWebhook(secret, headers(sign(secret, "msg_1", "1e9", body), "1e9"), body, { now: () => now }), /Unix seconds/],
    ["no signature", () => verifyWebhook(secret, { "webhook-id": "msg_1", "webhook-timestamp": timestamp }, body, { now: () => now }), /missing/],
    ["a secret that is not base64", () => verifyWebhook("whsec_not base64!", headers("v1,x"), body, { now: () => now }), /secret/],
  ];
  for (const [name, verify, message] of refusals) {
    test(`refuses ${name}`, () => assert.throws(verify, (err: unknown) => err instanceof WebhookVerificationError && message.test(err.message)));
  }

  test("the tolerance is an option", () => {
    const sig = sign(secret, "msg_1", timestamp, body);
    assert.equal(verifyWebhook(secret, headers(sig), body, { now: () => now + 3_600_000, toleranceSeconds: 3600 }).id, "msg_1");
  });
});
