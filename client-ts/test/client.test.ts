import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";
import { maxKeyLength, maxMemoryAgeMs, ProblemError, TollgateClient, type ClientOptions, type RuleResult, type WireCheckRequest } from "../src/index.js";
import { leaseLeftMs, toWire } from "../src/decision.js";
import { allowed, close, held, hourlyHeaders, listen, patientMs, problem, startFakeCheckAPI, type FakeCheckAPI } from "./servers.js";

const token = "service-token";

/** denied is a rate_limited answer with a 1.5 s wait. */
const denied = {
  headers: { ...hourlyHeaders, RateLimit: '"hourly";r=0;t=3', "X-RateLimit-Remaining": "0", "Retry-After": "2" },
  body: {
    ...allowed, allowed: false, reason: "rate_limited", remaining: 0, reset_after_ms: 3000, retry_after_ms: 1500,
    rules: [{ name: "hourly", algorithm: "gcra" as const, mode: "enforce" as const, limit: 5000, window_s: 3600,
      allowed: false, remaining: 0, reset_after_ms: 3000, retry_after_ms: 1500 }],
  },
};

describe("check", () => {
  let fake: FakeCheckAPI;
  before(async () => {
    fake = await startFakeCheckAPI();
  });
  after(async () => fake.close());
  const client = (opts: Partial<ClientOptions> = {}) => new TollgateClient({ baseUrl: fake.url + "/", serviceToken: token, timeoutMs: patientMs, ...opts });

  test("sends the check with the service token and reads the decision and its headers", async () => {
    fake.answer = () => ({ headers: { ...hourlyHeaders, "X-Other": "no" }, body: allowed });
    fake.checks.length = 0;
    const d = await client().check({ key: "tg_k", ip: "203.0.113.7", method: "post", resource: "/v1/search", cost: 3, dryRun: true });
    assert.deepEqual(fake.checks, [{ key: "tg_k", ip: "203.0.113.7", resource: "POST /v1/search", cost: 3, dry_run: true }]);
    assert.equal(fake.authorizations.at(-1), "Bearer " + token);
    assert.equal(d.allowed, true);
    assert.equal(d.plan, "pro");
    assert.equal(d.degraded, false);
    assert.equal(d.remembered, false);
    assert.deepEqual(d.headers, hourlyHeaders);
  });

  test("the server's defaults: cost 1, resource absent; peek is cost 0", async () => {
    fake.answer = () => ({ body: allowed });
    fake.checks.length = 0;
    await client().check({ ip: "203.0.113.7" });
    await client().check({ ip: "203.0.113.7", resource: "GET /repos", cost: 5, peek: true });
    assert.deepEqual(fake.checks, [{ ip: "203.0.113.7", cost: 1 }, { ip: "203.0.113.7", resource: "GET /repos", cost: 0 }]);
  });

  test("a refused check is a ProblemError naming the fields", async () => {
    fake.answer = () => ({
      status: 422, headers: { "Content-Type": "application/problem+json" },
      body: JSON.stringify({ type: "about:blank", title: "Unprocessable Entity", status: 422, code: "invalid",
        detail: "the request has invalid fields", errors: { ip: "must be an IPv4 or IPv6 address" } }),
    });
    const err = await client().check({ ip: "nope" }).catch((e: unknown) => e);
    assert.ok(err instanceof ProblemError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.code, "invalid");
    assert.deepEqual(err.errors, { ip: "must be an IPv4 or IPv6 address" });
    assert.equal(err.message, "422 invalid: the request has invalid fields: ip must be an IPv4 or IPv6 address");
  });

  test("a bad service token is a 401 ProblemError, not a decision", async () => {
    fake.answer = () => ({ status: 401, headers: { "Content-Type": "application/problem+json" },
      body: JSON.stringify({ type: "about:blank", title: "Unauthorized", status: 401, code: "unauthorized" }) });
    const err = await client({ failMode: "open" }).check({ ip: "203.0.113.7" }).catch((e: unknown) => e);
    assert.ok(err instanceof ProblemError && err.status === 401 && err.code === "unauthorized", String(err));
  });

  for (const [name, answer] of [
    ["a 500", { status: 500, body: "upstream exploded" }],
    ["a 503 problem", { status: 503, headers: { "Content-Type": "application/problem+json" }, body: '{"status":503,"code":"unavailable"}' }],
    ["a 502 of a load balancer", { status: 502, headers: { "Content-Type": "text/html" }, body: "<h1>Bad Gateway</h1>" }],
    ["a 408 of a proxy", { status: 408, body: "request timeout" }],
    ["a 429 of a proxy, even as JSON", { status: 429, headers: { "Content-Type": "application/json" }, body: '{"error":"slow down"}' }],
  ] as const) {
    test(`${name}: fail open allows, fail closed denies, both degraded`, async () => {
      fake.answer = () => answer;
      const open = await client().check({ ip: "203.0.113.7" });
      assert.equal(open.allowed, true);
      assert.equal(open.reason, "ok");
      assert.equal(open.degraded, true);
      assert.ok(open.cause instanceof Error);
      assert.deepEqual(open.headers, {});
      const closed = await client({ failMode: "closed" }).check({ ip: "203.0.113.7" });
      assert.equal(closed.allowed, false);
      assert.equal(closed.reason, "unavailable");
      assert.equal(closed.retry_after_ms, 1000);
      assert.equal(closed.degraded, true);
      assert.deepEqual(closed.headers, { "Retry-After": "1" });
      assert.ok(closed.cause instanceof Error);
    });
  }

  // Something in between that refuses a check (a WAF's 403 on a key that
  // looks like an attack) must not let the request through: any status
  // but 2xx, 5xx, 408 and 429, Tollgate's problem or not, rejects whatever
  // the fail mode, and so does a 200 that is not a decision.
  const html = { "Content-Type": "text/html" };
  for (const [name, answer, status] of [
    ["a WAF's 403 page", { status: 403, headers: html, body: "<html><body>403 Forbidden - Request blocked</body></html>" }, 403],
    ["a gateway's 403 JSON", { status: 403, body: { message: "Forbidden" } as never }, 403],
    ["a 404 of a load balancer", { status: 404, headers: html, body: "<h1>Not Found</h1>" }, 404],
    ["a 405", { status: 405, body: "" }, 405],
    ["a 409", { status: 409, body: { error: "conflict" } as never }, 409],
    ["a 451", { status: 451, headers: html, body: "<h1>Unavailable For Legal Reasons</h1>" }, 451],
    ["a redirect", { status: 302, headers: { Location: "/login" }, body: "" }, 302],
    ["a 204", { status: 204, body: "" }, 204],
    ["a 200 that is not a decision", { body: "<html>proxy</html>" }, undefined],
    ["a 200 whose JSON is not a decision", { body: { nope: 1 } as never }, undefined],
    ["a 200 of JSON null", { body: "null" }, undefined],
    ["a 200 without a body", { body: "" }, undefined],
  ] as const) {
    test(`${name}: rejects, fail open or closed`, async () => {
      fake.answer = () => answer;
      for (const failMode of ["open", "closed"] as const) {
        const err = await client({ failMode }).check({ key: "' OR 1=1 --" }).then((d) => d, (e: unknown) => e);
        assert.ok(err instanceof Error, `fail ${failMode}: ${JSON.stringify(err)}, want a rejection`);
        assert.equal(err instanceof ProblemError ? err.status : undefined, status, `fail ${failMode}: ${String(err)}`);
      }
    });
  }

  test("a Tollgate problem of another status is still a refusal: the base URL is not a check API", async () => {
    fake.answer = () => problem(404, "not_found", "no such endpoint");
    const err = await client({ failMode: "open" }).check({ ip: "203.0.113.7" }).catch((e: unknown) => e);
    assert.ok(err instanceof ProblemError && err.status === 404 && err.code === "not_found", String(err));
  });

  test("a key longer than maxKeyLength is denied as invalid_key without asking", async () => {
    fake.answer = () => ({ body: allowed });
    fake.checks.length = 0;
    for (const n of [maxKeyLength + 1, 17 << 10]) {
      const d = await client().check({ key: "k".repeat(n), ip: "203.0.113.7" });
      assert.equal(d.allowed, false);
      assert.equal(d.reason, "invalid_key");
      assert.equal(d.degraded, false);
    }
    assert.equal(fake.checks.length, 0);
    assert.equal((await client().check({ key: "k".repeat(maxKeyLength) })).allowed, true);
    assert.equal(fake.checks.length, 1);
  });

  test("autoHold asks for a hold only where a rule wants one; hold wins", async () => {
    fake.answer = () => ({ body: allowed });
    fake.checks.length = 0;
    await client().check({ key: "tg_x", autoHold: true });
    await client().check({ key: "tg_x", autoHold: true, hold: true });
    assert.deepEqual(fake.checks, [{ key: "tg_x", cost: 1, auto_hold: true }, { key: "tg_x", cost: 1, hold: true }]);
  });

  test("remembers a denial's wait per request and answers locally until it passes", async () => {
    let now = 1_000_000;
    const c = client({ now: () => now });
    fake.answer = (check) => (check.resource === "GET /repos" ? denied : { headers: hourlyHeaders, body: allowed });
    fake.checks.length = 0;
    const first = await c.check({ key: "tg_k", resource: "GET /repos" });
    assert.equal(first.allowed, false);
    assert.equal(first.remembered, false);
    assert.equal(fake.checks.length, 1);

    now += 400;
    const again = await c.check({ key: "tg_k", resource: "GET /repos" });
    assert.equal(fake.checks.length, 1, "the remembered denial must not be asked again");
    assert.equal(again.remembered, true);
    assert.equal(again.allowed, false);
    assert.equal(again.retry_after_ms, 1100);
    assert.equal(again.reset_after_ms, 2600);
    assert.equal(again.rules[0]?.retry_after_ms, 1100);
    assert.equal(again.headers["Retry-After"], "2");
    assert.equal(again.headers["RateLimit"], '"hourly";r=0;t=3');
    now += 500;
    assert.equal((await c.check({ key: "tg_k", resource: "GET /repos" })).headers["Retry-After"], "1");
    assert.equal(fake.checks.length, 1);

    // Another key, resource or cost is another request.
    await c.check({ key: "tg_other", resource: "GET /repos" });
    await c.check({ key: "tg_k", resource: "GET /repos", cost: 2 });
    await c.check({ key: "tg_k", resource: "GET /users" });
    assert.equal(fake.checks.length, 4);

    // Once the wait has passed, it asks again.
    now += 600;
    await c.check({ key: "tg_k", resource: "GET /repos" });
    assert.equal(fake.checks.length, 5);
  });

  test("a wait of -1 (never) or a degraded closed denial is not remembered; memorySize -1 remembers nothing", async () => {
    fake.answer = () => ({ body: { ...denied.body, retry_after_ms: -1 } });
    fake.checks.length = 0;
    const c = client();
    await c.check({ key: "tg_k" });
    await c.check({ key: "tg_k" });
    assert.equal(fake.checks.length, 2);
    fake.answer = () => denied;
    const forgetful = client({ memorySize: -1 });
    await forgetful.check({ key: "tg_k" });
    await forgetful.check({ key: "tg_k" });
    assert.equal(fake.checks.length, 4);
  });

  /** deniedFor is a denial with a wait of waitMs by a rule of algorithm, with reason. */
  const deniedFor = (waitMs: number, reason = "rate_limited", algorithm: RuleResult["algorithm"] = "gcra", degraded = false) => ({
    body: {
      ...allowed, allowed: false, reason, remaining: 0, retry_after_ms: waitMs, degraded,
      rules: [{ name: "hourly", algorithm, mode: "enforce" as const, limit: 5000, window_s: 3600,
        allowed: false, remaining: 0, reset_after_ms: waitMs, retry_after_ms: waitMs, degraded }],
    },
  });

  for (const [name, reason, algorithm] of [
    ["an hourly rule", "rate_limited", "gcra"],
    ["a monthly quota", "rate_limited", "fixed_window"],
    ["a spend cap", "spend_cap", "fixed_window"],
  ] as const) {
    test(`a long wait (${name}) is remembered for maxMemoryAgeMs at most, counting down the server's wait`, async () => {
      const hour = 3_600_000;
      let now = 1_000_000;
      const c = client({ now: () => now });
      fake.answer = () => deniedFor(hour, reason, algorithm);
      fake.checks.length = 0;
      await c.check({ key: "tg_k", resource: "GET /repos" });
      now += maxMemoryAgeMs - 1;
      const d = await c.check({ key: "tg_k", resource: "GET /repos" });
      assert.equal(d.remembered, true);
      assert.equal(d.reason, reason);
      assert.equal(d.retry_after_ms, hour - 999);
      assert.equal(fake.checks.length, 1);
      now += 1;
      assert.equal((await c.check({ key: "tg_k", resource: "GET /repos" })).remembered, false);
      assert.equal(fake.checks.length, 2);
    });
  }

  for (const [name, answer] of [
    // A slot is freed when any request in flight ends, long before the
    // wait (the other lease's expiry).
    ["a denial by a concurrency rule", deniedFor(3_600_000, "rate_limited", "concurrency")],
    // The limiter could not be asked: only a check tells when it is back.
    ["an unavailable denial", deniedFor(1000, "unavailable", "gcra", true)],
    ["a degraded denial", deniedFor(5000, "rate_limited", "gcra", true)],
    // A reason added later: nothing says what its wait means.
    ["a denial with an unknown reason", deniedFor(5000, "something_new")],
  ] as const) {
    test(`${name} is not remembered`, async () => {
      fake.answer = () => answer;
      fake.checks.length = 0;
      const c = client({ now: () => 1_000_000 });
      for (let i = 0; i < 3; i++) {
        const d = await c.check({ key: "tg_k", resource: "POST /v1/complete" });
        assert.equal(d.allowed, false);
        assert.equal(d.remembered, false);
      }
      assert.equal(fake.checks.length, 3);
    });
  }

  for (const op of ["settle", "release"] as const) {
    test(`${op} forgets the remembered denials of the hold's tenant at once, no other tenant's; of an unknown ID, everyone's`, async () => {
      // Tenants whose callers share one allowance: a check is admitted
      // with a hold (and lease) when its tenant holds none, and denied
      // for an hour while it does. Keys are "tenant/name".
      fake.checks.length = 0;
      fake.settles.length = 0;
      fake.leases.length = 0;
      const held = new Map<string, string>();
      let n = 0;
      const givenBack = (id: string) => fake.settles.some((s) => s.hold_id === id) || fake.leases.some((l) => l.op === "release" && l.lease_id === id);
      fake.answer = (check: WireCheckRequest) => {
        const tenant = (check.key ?? "").split("/")[0] ?? "";
        const id = held.get(tenant);
        if (id !== undefined && !givenBack(id)) {
          return { body: { ...deniedFor(3_600_000).body, tenant_id: tenant } };
        }
        const fresh = `h${++n}`;
        held.set(tenant, fresh);
        return { body: { ...allowed, tenant_id: tenant, hold_id: fresh, lease_id: fresh } };
      };
      const c = client({ now: () => 1_000_000 }); // time stands still
      const check = (key: string) => c.check({ key, resource: "POST /v1/complete" });
      const give = (id: string) => (op === "settle" ? c.settle(id, 0) : c.release(id));
      const [a1, a2, b] = ["tenant-a/1", "tenant-a/2", "tenant-b/1"];
      const heldA = await check(a1);
      assert.ok(heldA.allowed && heldA.hold_id);
      assert.ok((await check(b)).allowed);
      for (const key of [a1, a2, b]) {
        await check(key); // denied, and remembered
      }
      for (const key of [a1, a2, b]) {
        assert.equal((await check(key)).remembered, true, key);
      }
      assert.equal(fake.checks.length, 5);

      await give(heldA.hold_id);
      const again = await check(a2);
      assert.equal(again.remembered, false, `${a2} after tenant-a's ${op}`);
      assert.equal(again.allowed, true);
      assert.equal((await check(a1)).remembered, false, `${a1} after tenant-a's ${op}`);
      assert.equal((await check(b)).remembered, true, `${b} after tenant-a's ${op}`);
      assert.equal(fake.checks.length, 7);

      // An ID this client was not given (another process opened it):
      // whose it is is unknown, so every denial goes.
      await give("opened-elsewhere");
      assert.equal((await check(b)).remembered, false, `${b} after a ${op} of an unknown ID`);
    });
  }

  test("memory holds at most memorySize denials, the least recently used out first", async () => {
    fake.answer = () => denied;
    fake.checks.length = 0;
    const c = client({ memorySize: 2 });
    await c.check({ key: "a" });
    await c.check({ key: "b" });
    await c.check({ key: "a" }); // remembered: a is now the most recently used
    await c.check({ key: "c" }); // b goes
    assert.equal(fake.checks.length, 3);
    await c.check({ key: "a" });
    assert.equal(fake.checks.length, 3);
    await c.check({ key: "b" });
    assert.equal(fake.checks.length, 4);
  });

  test("an aborted signal rejects the check instead of deciding", async () => {
    fake.answer = () => ({ body: allowed });
    await assert.rejects(client().check({ ip: "203.0.113.7", signal: AbortSignal.abort() }), { name: "AbortError" });
  });

  describe("holds", () => {
    beforeEach(() => {
      fake.checks.length = 0;
      fake.settles.length = 0;
      fake.answer = () => ({ body: held });
      fake.settleAnswer = (s) => ({ body: { hold_id: s.hold_id, estimate: 100, cost: s.cost, status: "settled", repeated: false } });
    });

    test("a check with hold sends hold and hold_ttl_s (whole seconds, rounded up) and reads the hold", async () => {
      const d = await client().check({ key: "tg_x", cost: 10, hold: true, holdTtlS: 89.5 });
      await client().check({ key: "tg_x", cost: 10, hold: true });
      assert.deepEqual(fake.checks, [{ key: "tg_x", cost: 10, hold: true, hold_ttl_s: 90 }, { key: "tg_x", cost: 10, hold: true }]);
      assert.equal(d.hold_id, "h1");
      assert.equal(d.hold_expires_at, "2026-11-25T15:00:00.000Z");
    });

    test("a check with autoHold sends auto_hold and hold_ttl_s: the TTL of a hold a rule opens", async () => {
      assert.deepEqual(toWire({ key: "tg_x", autoHold: true, holdTtlS: 59.2 }), { key: "tg_x", cost: 1, auto_hold: true, hold_ttl_s: 60 });
      await client().check({ key: "tg_x", cost: 10, autoHold: true, holdTtlS: 60 });
      assert.deepEqual(fake.checks, [{ key: "tg_x", cost: 10, auto_hold: true, hold_ttl_s: 60 }]);
    });

    test("a cost that is not a safe integer ≥ 0 is a TypeError from check and settle, and nothing is sent", async () => {
      for (const memorySize of [0, -1]) {
        for (const cost of [Number.NaN, Number.POSITIVE_INFINITY, 2.5, -1, 2 ** 53]) {
          await assert.rejects(client({ memorySize }).check({ key: "tg_x", cost, hold: true }), TypeError, `check, cost ${cost}, memorySize ${memorySize}`);
          await assert.rejects(client({ memorySize }).settle("h1", cost), TypeError, `settle, cost ${cost}`);
        }
      }
      for (const holdTtlS of [Number.NaN, Number.POSITIVE_INFINITY, -1]) {
        await assert.rejects(client().check({ key: "tg_x", hold: true, holdTtlS }), TypeError, `holdTtlS ${holdTtlS}`);
      }
      assert.deepEqual(fake.checks, []);
      assert.deepEqual(fake.settles, []);
      await client().settle("h1", 0);
      assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 0 }]);
    });

    test("leaseLeftMs counts a lease's life by the server's clock: its expiry less the answer's Date, less a second", () => {
      const local = Date.parse("2026-01-01T00:00:00.000Z"); // this machine's clock, an hour behind the server's
      assert.equal(leaseLeftMs("2026-01-01T01:00:30.250Z", "Thu, 01 Jan 2026 01:00:00 GMT", local), 29_250);
      assert.equal(leaseLeftMs("2026-01-01T01:00:00.500Z", "Thu, 01 Jan 2026 01:00:00 GMT", local), 0);
      assert.equal(leaseLeftMs("2026-01-01T00:00:30.000Z", null, local), 30_000, "without a Date, the local clock");
      assert.equal(leaseLeftMs("2027-01-01T00:00:00.000Z", null, local), 3_600_000, "never more than an hour");
      assert.equal(leaseLeftMs("soon", "Thu, 01 Jan 2026 01:00:00 GMT", local), undefined);
    });

    test("settle posts the hold and the actual cost with the service token and returns the settlement", async () => {
      const s = await client().settle("h1", 3);
      assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 3 }]);
      assert.equal(fake.authorizations.at(-1), "Bearer " + token);
      assert.deepEqual(s, { hold_id: "h1", estimate: 100, cost: 3, status: "settled", repeated: false });
    });

    for (const [status, code, errors] of [
      [404, "not_found", undefined],
      [409, "conflict", undefined],
      [422, "invalid", { cost: "must be at least 0" }],
    ] as const) {
      test(`a ${status} settlement is a ProblemError`, async () => {
        fake.settleAnswer = () => problem(status, code, "refused", errors);
        const err = await client().settle("h1", 3).catch((e: unknown) => e);
        assert.ok(err instanceof ProblemError, String(err));
        assert.equal(err.status, status);
        assert.equal(err.code, code);
        assert.deepEqual(err.errors, errors ?? {});
      });
    }

    test("a settlement that is not one, or a check API that is down, rejects with an Error", async () => {
      fake.settleAnswer = () => ({ body: "<html>proxy</html>" });
      await assert.rejects(client().settle("h1", 3), /tollgate: settle: the answer is not JSON/);
      fake.settleAnswer = () => ({ body: { ...allowed } as never });
      await assert.rejects(client().settle("h1", 3), /not a settlement/);
      const down = new TollgateClient({ baseUrl: "http://127.0.0.1:1", serviceToken: "t" });
      await assert.rejects(down.settle("h1", 3), (err: unknown) => err instanceof Error && !(err instanceof ProblemError) && /^tollgate: settle:/.test(err.message));
      await assert.rejects(client().settle("h1", 3, AbortSignal.abort()), { name: "AbortError" });
    });

    test("renew and release post the lease ID and read the lease; a lease that is gone is a 404 ProblemError", async () => {
      fake.leases.length = 0;
      const c = client();
      assert.deepEqual(await c.renew("l1"), { lease_id: "l1", expires_at: "2026-11-25T15:00:30.000Z" });
      assert.deepEqual(await c.release("l1"), { lease_id: "l1", released: true });
      const err = await c.renew("gone").catch((e: unknown) => e);
      assert.ok(err instanceof ProblemError && err.status === 404, String(err));
      assert.deepEqual(fake.leases, [{ op: "renew", lease_id: "l1" }, { op: "release", lease_id: "l1" }, { op: "renew", lease_id: "gone" }]);
    });

    test("a renewal or release that is not a lease rejects with an Error naming the call", async () => {
      let body = "<html>proxy</html>";
      const server = createServer((_req, res) => {
        res.setHeader("Content-Type", "application/json");
        res.end(body);
      });
      const url = await listen(server);
      try {
        const c = new TollgateClient({ baseUrl: url, serviceToken: token, timeoutMs: patientMs });
        for (const op of ["renew", "release"] as const) {
          body = "<html>proxy</html>";
          await assert.rejects(c[op]("l1"), (err: unknown) => err instanceof Error && err.constructor === Error &&
            err.message === `tollgate: ${op}: the answer is not JSON`);
          for (const notALease of ["null", "{}", "[]"]) {
            body = notALease;
            await assert.rejects(c[op]("l1"), (err: unknown) => err instanceof Error && err.constructor === Error &&
              err.message === `tollgate: ${op}: the answer is not a lease (lease_id)`, notALease);
          }
        }
      } finally {
        await close(server);
      }
    });

    test("a remembered denial answers the same request with hold locally, as the Go SDK does", async () => {
      fake.answer = () => ({ body: { ...allowed, allowed: false, reason: "rate_limited", remaining: 0, retry_after_ms: 60_000 } });
      const c = client();
      await c.check({ key: "tg_x", resource: "POST /v1/complete", cost: 100 });
      const d = await c.check({ key: "tg_x", resource: "POST /v1/complete", cost: 100, hold: true });
      assert.equal(fake.checks.length, 1);
      assert.equal(d.remembered, true);
      assert.equal(d.allowed, false);
      assert.equal(d.hold_id, undefined);
    });
  });

  describe("me", () => {
    /** standing is the fake's answer for the key tg_good, every field of the Go SDK's test. */
    const standing = {
      tenant_id: "t1", tenant: "acme", key_id: "k1", plan: "pro",
      rules: [{ name: "hourly", algorithm: "gcra" as const, mode: "enforce" as const, resource: "*", scope: "key" as const,
        limit: 5000, window_s: 3600, remaining: 4990, reset_after_ms: 7200 }],
      quota: { mode: "enforce" as const, included_units: 100_000, used: 10, remaining: 99_990, reset_after_ms: 1000 },
      credits: { mode: "overage" as const, balance: 250, overdraft: 50 },
    };
    beforeEach(() => {
      fake.looks.length = 0;
      fake.meAnswer = (key) => {
        switch (key) {
          case "tg_good":
            return { body: standing };
          case "tg_busy":
            return { ...problem(429, "rate_limited", "at most 60 looks a minute per key"), headers: { "Content-Type": "application/problem+json", "Retry-After": "7" } };
          default:
            return problem(403, "key_revoked", "the API key has been revoked");
        }
      };
    });

    test("gets /v1/me with the API key, not the service token, and returns the standing", async () => {
      assert.deepEqual(await client().me("tg_good"), standing);
      assert.equal(fake.looks.length, 1);
      assert.equal(fake.looks[0]?.method, "GET");
      assert.equal(fake.looks[0]?.headers.authorization, "Bearer tg_good");
      assert.equal(fake.looks[0]?.headers["content-type"], undefined);
    });

    test("a refusal is a ProblemError; a 429 says when to look again", async () => {
      const revoked = await client().me("tg_revoked").catch((e: unknown) => e);
      assert.ok(revoked instanceof ProblemError && revoked.status === 403 && revoked.code === "key_revoked", String(revoked));
      const busy = await client().me("tg_busy").catch((e: unknown) => e);
      assert.ok(busy instanceof ProblemError && busy.status === 429, String(busy));
      assert.equal(busy.retryAfterMs, 7000);
    });

    test("an answer that is not a standing, or a check API that is down, rejects with an Error; the fail mode does not decide", async () => {
      fake.meAnswer = () => ({ body: "<html>proxy</html>" });
      await assert.rejects(client().me("tg_good"), /^Error: tollgate: me: the answer is not JSON/);
      fake.meAnswer = () => ({ body: { ...allowed } as never });
      await assert.rejects(client().me("tg_good"), /not a standing/);
      const down = new TollgateClient({ baseUrl: "http://127.0.0.1:1", serviceToken: "t", failMode: "open" });
      await assert.rejects(down.me("tg_good"), (err: unknown) => err instanceof Error && !(err instanceof ProblemError) && /^tollgate: me:/.test(err.message));
      await assert.rejects(client().me("tg_good", AbortSignal.abort()), { name: "AbortError" });
    });
  });

  test("options are checked", () => {
    assert.throws(() => new TollgateClient({ baseUrl: "ftp://x", serviceToken: token }), /base URL/);
    assert.throws(() => new TollgateClient({ baseUrl: "http://x/?a=1", serviceToken: token }), /no query/);
    assert.throws(() => new TollgateClient({ baseUrl: "http://x", serviceToken: " " }), /service token/);
    assert.throws(() => new TollgateClient({ baseUrl: "http://x", serviceToken: token, failMode: "ajar" as "open" }), /failMode/);
  });
});

describe("outages", () => {
  test("a check API that is down: fail open allows, fail closed denies", async () => {
    const server = createServer();
    const url = await listen(server);
    await close(server); // nothing listens there now
    const open = await new TollgateClient({ baseUrl: url, serviceToken: token }).check({ ip: "203.0.113.7" });
    assert.equal(open.allowed, true);
    assert.equal(open.degraded, true);
    assert.ok(open.cause);
    const closed = await new TollgateClient({ baseUrl: url, serviceToken: token, failMode: "closed" }).check({ ip: "203.0.113.7" });
    assert.equal(closed.allowed, false);
    assert.equal(closed.reason, "unavailable");
    assert.equal(closed.degraded, true);
  });

  test("a check API that does not answer within timeoutMs: the fail mode decides", async () => {
    const server = createServer(() => {}); // never answers
    const url = await listen(server);
    try {
      const started = Date.now();
      const d = await new TollgateClient({ baseUrl: url, serviceToken: token, timeoutMs: 100, failMode: "closed" })
        .check({ ip: "203.0.113.7" });
      assert.equal(d.allowed, false);
      assert.equal(d.degraded, true);
      assert.equal(d.cause?.name, "TimeoutError");
      assert.ok(Date.now() - started < 5000);
    } finally {
      await close(server);
    }
  });
});
