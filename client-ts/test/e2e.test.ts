// End-to-end tests against the real check API and admin server, seeded
// with the demo. e2e_test.go (beside package.json) builds and starts them
// and runs this with TOLLGATE_E2E_API_URL, TOLLGATE_E2E_ADMIN_URL and
// TOLLGATE_E2E_SEED (what `admin seed demo --json` printed) set; without
// them these tests are skipped.
import assert from "node:assert/strict";
import { createServer, request, type RequestListener, type Server } from "node:http";
import { after, before, describe, test } from "node:test";
import express from "express";
import { middleware, ProblemError, reportCost, TollgateClient } from "../src/index.js";
import { close, listen, patientMs, readBody, send, serve, type Answer } from "./servers.js";

const apiUrl = process.env.TOLLGATE_E2E_API_URL ?? "";
const adminUrl = process.env.TOLLGATE_E2E_ADMIN_URL ?? "";
const seedJSON = process.env.TOLLGATE_E2E_SEED ?? "";
const skip = apiUrl === "" || adminUrl === "" || seedJSON === ""
  ? "TOLLGATE_E2E_API_URL, TOLLGATE_E2E_ADMIN_URL and TOLLGATE_E2E_SEED are unset: run through e2e_test.go (make test)"
  : false;

interface Seed {
  service_token: string;
  keys: Record<string, string>;
  users: Record<string, { email: string; password: string }>;
}

describe("end to end", { skip }, () => {
  const seed = (skip ? { service_token: "", keys: {}, users: {} } : JSON.parse(seedJSON)) as Seed;
  let roundTrips = 0;
  const counting: typeof fetch = (input, init) => {
    roundTrips++;
    return fetch(input, init);
  };
  let service: { url: string; server: import("node:http").Server };
  let tollgate: TollgateClient;
  before(async () => {
    tollgate = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, fetch: counting, timeoutMs: patientMs });
    service = await serve(middleware(tollgate, { cost: (req) => Number(req.headers["x-cost"] ?? 1) }));
  });
  after(async () => close(service.server));

  const get = (headers: Record<string, string> = {}) => send(service.url, "GET", "/v1/repos", headers);
  const header = (a: Answer, name: string) => a.headers[name.toLowerCase()];

  test("anonymous callers: 60 an hour per address, then 429, then denied without asking", async () => {
    for (let i = 1; i <= 60; i++) {
      const a = await get();
      assert.equal(a.status, 200, `anonymous request ${i}`);
      if (i === 1) {
        assert.equal(header(a, "RateLimit-Policy"), '"hourly";q=60;w=3600');
        assert.equal(header(a, "X-RateLimit-Limit"), "60");
        assert.equal(header(a, "X-RateLimit-Remaining"), "59");
        assert.equal(header(a, "X-RateLimit-Used"), "1");
        assert.equal(header(a, "Retry-After"), undefined);
      }
    }
    const denied = await get();
    assert.equal(denied.status, 429);
    assert.equal(header(denied, "Content-Type"), "application/problem+json");
    assert.equal(header(denied, "RateLimit-Policy"), '"hourly";q=60;w=3600');
    assert.equal(header(denied, "X-RateLimit-Remaining"), "0");
    const retry = Number(header(denied, "Retry-After"));
    assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}, want 1–60 s (60 an hour refills one a minute)`);
    assert.equal(JSON.parse(denied.body).code, "rate_limited");
    assert.equal(roundTrips, 61);

    const again = await get();
    assert.equal(again.status, 429);
    assert.equal(roundTrips, 61, "a remembered denial must not ask the check API");
    const retryAgain = Number(header(again, "Retry-After"));
    assert.ok(retryAgain >= 1 && retryAgain <= retry, `Retry-After ${retryAgain}, want 1–${retry}`);
  });

  test("a pro key passes with its plan's headers", async () => {
    const a = await get({ Authorization: `Bearer ${seed.keys.pro}` });
    assert.equal(a.status, 200);
    assert.equal(header(a, "RateLimit-Policy"), '"hourly";q=5000;w=3600');
    assert.equal(header(a, "RateLimit"), '"hourly";r=4999;t=1');
    assert.equal(header(a, "X-RateLimit-Remaining"), "4999");
    const d = await tollgate.check({ key: seed.keys.pro, method: "POST", resource: "/v1/search", dryRun: true });
    assert.equal(d.allowed, true);
    assert.equal(d.tier, "authenticated");
    assert.equal(d.plan, "pro");
    assert.equal(d.rules.length, 2);
  });

  test("a path spelled differently is still the rule's path", async () => {
    // pro's search rule: a bucket of 10 that refills 10 a second. The
    // first request takes all 10; the same path spelled otherwise must
    // meet the empty bucket.
    const key = { "X-API-Key": seed.keys.pro ?? "", "X-Cost": "10" };
    const first = await send(service.url, "POST", "/v1/search", key);
    assert.equal(first.status, 200);
    const dodge = await send(service.url, "POST", "//v1/./%73earch/", key);
    assert.equal(dodge.status, 429);
    assert.equal(header(dodge, "RateLimit-Policy"), '"search";q=10;w=1');
  });

  test("through Express, a target in absolute form or in another case is still the search rule's path", async () => {
    // A fresh key has pro's search bucket full (10, refilled 10 a second):
    // the plain path takes all 10, and every other spelling of it that
    // Express routes to the same handler must meet the empty bucket.
    const admin = await adminSession(seed);
    const key = await issueKey(admin, "demo-pro", "ts-e2e-spellings");
    // Remembering off: every spelling is asked of the check API.
    const asking = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, timeoutMs: patientMs, memorySize: -1 });
    const app = await expressService(asking, "/v1/search");
    try {
      const headers = { "X-API-Key": key, "X-Cost": "10" };
      const first = await send(app.url, "POST", "/v1/search", headers);
      assert.equal(first.status, 200);
      assert.equal(first.body, "handled");
      for (const target of [`${app.url}/v1/search`, "/V1/Search", `${app.url}/v1/SEARCH?q=1`, "http://other.example/v1/search"]) {
        const dodge = await send(app.url, "POST", target, headers);
        assert.equal(dodge.status, 429, `${target}: ${dodge.body}`);
        assert.equal(header(dodge, "RateLimit-Policy"), '"search";q=10;w=1', target);
      }
      // The check API names a resource in absolute form by its path too,
      // whoever sends it.
      const d = await asking.check({ key, resource: "POST http://other.example/v1/search", cost: 10 });
      assert.equal(d.allowed, false);
      assert.equal(d.policy, "search");
    } finally {
      await close(app.server);
    }
  });

  // llmKey makes a tenant (tenant, made unique) on the demo llm plan and
  // a key of it (named name), and waits until the check API knows it.
  const llmKey = async (tenant: string, name: string): Promise<string> => {
    const admin = await adminSession(seed);
    const plans = await admin<{ items: { id: number; name: string }[] }>("GET", "/api/v1/plans?limit=100");
    const llm = plans.items.find((p) => p.name === "llm");
    assert.ok(llm, "the demo llm plan");
    const made = await admin<{ id: string }>("POST", "/api/v1/tenants", { name: `${tenant}-${Date.now()}`, plan_id: llm.id });
    const key = (await admin<{ secret: string }>("POST", `/api/v1/tenants/${made.id}/keys`, { name })).secret;
    await waitKnown(key);
    return key;
  };

  test("through Express, an admitted request's lease is released when it is answered", async () => {
    // llm allows 4 requests in flight per key on POST /v1/complete, each
    // holding a slot for 30 s unless released: more than 4, one after
    // another, pass only when each one's slot is released.
    const key = await llmKey("ts-e2e-llm", "ts-e2e-leases");
    const releases: Promise<boolean>[] = [];
    const recording: typeof fetch = (input, init) => {
      const sent = fetch(input, init);
      if (String(input).endsWith("/v1/release")) {
        releases.push(sent.then(async (r) => ((await r.clone().json()) as { released?: boolean }).released === true));
      }
      return sent;
    };
    const leasing = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, timeoutMs: patientMs, fetch: recording });
    // No holds: a held request's settlement would release its lease.
    const app = await expressService(leasing, "/v1/complete", false);
    try {
      for (let i = 1; i <= 6; i++) {
        await waitReleases(releases, i - 1); // the previous requests' releases have landed
        const a = await send(app.url, "POST", "/v1/complete", { "X-API-Key": key });
        assert.equal(a.status, 200, `request ${i}: ${a.body}`);
      }
      const released = await waitReleases(releases, 6);
      assert.deepEqual(released, Array(6).fill(true), "each request released a slot it held");
    } finally {
      await close(app.server);
    }
  });

  test("through Express, a request a rule holds (auto_hold) is settled, which frees its slot", async () => {
    // llm's tokens rule asks for holds on POST /v1/complete: the
    // middleware, told nothing of holds, checks with auto_hold, and the
    // check opens a hold that the response's end settles at the cost
    // (X-Cost), releasing the in-flight slot with it. More than 4
    // requests, one after another, pass only so.
    const key = await llmKey("ts-e2e-autohold", "ts-e2e-autohold");
    const settlements: Promise<{ cost?: number; status?: string }>[] = [];
    const releases: string[] = [];
    const recording: typeof fetch = (input, init) => {
      const sent = fetch(input, init);
      if (String(input).endsWith("/v1/settle")) {
        settlements.push(sent.then(async (r) => (await r.clone().json()) as { cost?: number; status?: string }));
      } else if (String(input).endsWith("/v1/release")) {
        releases.push(String(init?.body));
      }
      return sent;
    };
    const holding = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, timeoutMs: patientMs, fetch: recording });
    const app = await expressService(holding, "/v1/complete");
    try {
      for (let i = 1; i <= 6; i++) {
        await until(() => settlements.length >= i - 1);
        await Promise.all(settlements);
        const a = await send(app.url, "POST", "/v1/complete", { "X-API-Key": key, "X-Cost": "3" });
        assert.equal(a.status, 200, `request ${i}: ${a.body}`);
      }
      await until(() => settlements.length >= 6);
      const settled = (await Promise.all(settlements)).map((st) => [st.cost, st.status]);
      assert.deepEqual(settled, Array(6).fill([3, "settled"]), "each request's hold was settled at its cost");
      assert.deepEqual(releases, [], "a settlement releases the lease: no release is sent apart");
    } finally {
      await close(app.server);
    }
  });

  test("a key longer than maxKeyLength is denied as invalid_key, not refused as a body too large", async () => {
    const d = await tollgate.check({ key: "k".repeat(17 << 10), ip: "203.0.113.7" });
    assert.equal(d.allowed, false);
    assert.equal(d.reason, "invalid_key");
    const tooLong = await send(service.url, "GET", "/v1/repos", { "X-API-Key": "k".repeat(8 << 10) });
    assert.equal(tooLong.status, 401);
    assert.equal(JSON.parse(tooLong.body).code, "invalid_key");
  });

  test("llm: a freed slot and a settled hold end denials at once", async () => {
    // POST /v1/complete is held (a tokens rule of 100,000 a minute) and at
    // most 4 requests of a key are in flight (leases of 30 s).
    const key = await llmKey("ts-e2e-memory", "ts-e2e-memory");
    const one = { key, resource: "POST /v1/complete" };

    // A denial by the in-flight rule is not remembered: another process's
    // request ends, and its slot is free at once.
    const leases: string[] = [];
    try {
      for (let i = 1; i <= 4; i++) {
        const d = await tollgate.check(one);
        assert.ok(d.allowed && d.lease_id, `request ${i} in flight: ${d.reason}`);
        leases.push(d.lease_id);
      }
      const full = await tollgate.check(one);
      assert.equal(full.allowed, false);
      assert.equal(full.policy, "inflight");
      assert.ok(full.retry_after_ms > 1000, `retry ${full.retry_after_ms} ms, want until a lease expires`);
      const other = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, timeoutMs: patientMs });
      assert.equal((await other.release(leases[0] ?? "")).released, true);
      const again = await tollgate.check(one);
      assert.equal(again.remembered, false, "after a slot was freed elsewhere");
      assert.equal(again.allowed, true);
      leases[0] = again.lease_id ?? "";
    } finally {
      await Promise.all(leases.map((id) => tollgate.release(id).catch(() => undefined)));
    }

    // Settling a hold forgets the denials it caused.
    const all = { ...one, cost: 100_000 };
    const held = await tollgate.check({ ...all, hold: true });
    assert.ok(held.allowed && held.hold_id, `a hold of a minute's tokens: ${held.reason}`);
    const denied = await tollgate.check(all);
    assert.equal(denied.allowed, false);
    assert.equal(denied.remembered, false);
    assert.equal(denied.policy, "tokens");
    assert.equal((await tollgate.check(all)).remembered, true, "again while held");
    await tollgate.settle(held.hold_id, 0);
    const after = await tollgate.check(all);
    assert.equal(after.remembered, false, "after settling at 0");
    assert.equal(after.allowed, true);
    if (after.lease_id) {
      await tollgate.release(after.lease_id);
    }
  });

  test("me: where a key stands with every rule of its plan; an unknown key is a 401", async () => {
    const st = await tollgate.me(seed.keys.pro ?? "");
    assert.equal(st.tenant, "demo-pro");
    assert.equal(st.plan, "pro");
    assert.deepEqual(st.rules.map((r) => r.name).sort(), ["hourly", "search"]);
    const hourly = st.rules.find((r) => r.name === "hourly");
    assert.equal(hourly?.limit, 5000);
    assert.ok(hourly !== undefined && hourly.remaining <= 5000);
    const unknown = await tollgate.me("tg_000000000000000000000000000000000000").catch((e: unknown) => e);
    assert.ok(unknown instanceof ProblemError && unknown.status === 401, String(unknown));
  });

  test("an unknown key is a 401", async () => {
    const a = await get({ "X-API-Key": "tg_000000000000000000000000000000000000" });
    assert.equal(a.status, 401);
    assert.equal(header(a, "Content-Type"), "application/problem+json");
    assert.equal(JSON.parse(a.body).code, "invalid_key");
  });

  test("a revoked key is a 403", async () => {
    const admin = await adminSession(seed);
    const tenants = await admin<{ items: { id: string; name: string }[] }>("GET", "/api/v1/tenants?q=demo-pro");
    const tenant = tenants.items.find((t) => t.name === "demo-pro");
    assert.ok(tenant, "the demo-pro tenant");
    const issued = await admin<{ secret: string; key: { id: string } }>("POST", `/api/v1/tenants/${tenant.id}/keys`, { name: "ts-e2e" });
    await waitStatus(() => get({ "X-API-Key": issued.secret }), 200);
    await admin("POST", `/api/v1/tenants/${tenant.id}/keys/${issued.key.id}/revoke`);
    const revoked = await waitStatus(() => get({ "X-API-Key": issued.secret }), 403);
    assert.equal(JSON.parse(revoked.body).code, "key_revoked");
  });

  test("a hold round trip: check with hold, settle, repeat, conflict, unknown hold", async () => {
    const d = await tollgate.check({ key: seed.keys.pro, method: "GET", resource: "/v1/holds", cost: 5, hold: true, holdTtlS: 60 });
    assert.equal(d.allowed, true);
    assert.ok(d.hold_id, "an admitted check with hold opens a hold");
    const expires = Date.parse(d.hold_expires_at ?? "") - Date.now();
    assert.ok(expires > 0 && expires <= 61_000, `the hold expires in ${expires} ms, want within 60 s`);

    const settled = await tollgate.settle(d.hold_id, 2);
    assert.deepEqual(settled, { hold_id: d.hold_id, estimate: 5, cost: 2, status: "settled", repeated: false });
    assert.deepEqual(await tollgate.settle(d.hold_id, 2), { ...settled, repeated: true });

    const conflict = await tollgate.settle(d.hold_id, 3).catch((e: unknown) => e);
    assert.ok(conflict instanceof ProblemError && conflict.status === 409 && conflict.code === "conflict", String(conflict));
    const ref = JSON.parse(Buffer.from(d.hold_id, "base64url").toString()) as Record<string, unknown>;
    const unknownId = Buffer.from(JSON.stringify({ ...ref, n: "0".repeat(24) })).toString("base64url");
    const unknown = await tollgate.settle(unknownId, 2).catch((e: unknown) => e);
    assert.ok(unknown instanceof ProblemError && unknown.status === 404 && unknown.code === "not_found", String(unknown));
    // A negative cost is a TypeError before anything is sent; one past the
    // largest the check API settles is its 422.
    await assert.rejects(tollgate.settle(d.hold_id, -1), TypeError);
    const invalid = await tollgate.settle(d.hold_id, 2 ** 31 + 1).catch((e: unknown) => e);
    assert.ok(invalid instanceof ProblemError && invalid.status === 422 && invalid.errors.cost, String(invalid));
  });

  test("refusals of the check API are ProblemErrors naming the fields", async () => {
    const noCaller = await tollgate.check({ resource: "GET /" }).catch((e: unknown) => e);
    assert.ok(noCaller instanceof ProblemError && noCaller.status === 422 && noCaller.errors.ip, String(noCaller));
    const bad = new TollgateClient({ baseUrl: apiUrl, serviceToken: "not-a-token", timeoutMs: patientMs });
    const unauthorized = await bad.check({ ip: "203.0.113.7" }).catch((e: unknown) => e);
    assert.ok(unauthorized instanceof ProblemError && unauthorized.status === 401 && unauthorized.code === "unauthorized", String(unauthorized));
  });

  test("a WAF's 403 in front of the check API is a 500, never a pass", async () => {
    // The WAF blocks the body of a check whose key looks like an attack
    // with its own 403 page and passes the others on. Its refusal is no
    // outage for the fail mode to decide: "open", it would let whoever
    // sends such a key past every limit.
    const waf = createServer(async (req, res) => {
      const body = await readBody(req);
      if (body.includes("' OR 1=1")) {
        res.writeHead(403, { "Content-Type": "text/html" });
        res.end("<html><body>403 Forbidden - Request blocked</body></html>");
        return;
      }
      const headers = { Authorization: req.headers.authorization ?? "", "Content-Type": "application/json" };
      const r = await fetch(apiUrl + (req.url ?? ""), { method: req.method ?? "POST", headers, body });
      res.writeHead(r.status, { "Content-Type": r.headers.get("Content-Type") ?? "" });
      res.end(await r.text());
    });
    const wafUrl = await listen(waf);
    const behind = new TollgateClient({ baseUrl: wafUrl, serviceToken: seed.service_token, timeoutMs: patientMs, failMode: "open" });
    let served = 0;
    const protectedService = await serve(middleware(behind), (_req, res) => {
      served++;
      res.end("the protected answer");
    });
    try {
      for (const [key, status, wantServed] of [
        [seed.keys.pro ?? "", 200, true],
        ["tg_000000000000000000000000000000000000", 401, false],
        ["' OR 1=1 --", 500, false],
      ] as const) {
        const before = served;
        const a = await send(protectedService.url, "GET", "/v1/repos", { Authorization: `Bearer ${key}` });
        assert.equal(a.status, status, `${key}: ${a.body}`);
        assert.equal(served > before, wantServed, `${key}: served`);
      }
    } finally {
      await Promise.all([close(protectedService.server), close(waf)]);
    }
  });

  // llm's tokens rule holds POST /v1/complete and asks for a refund on a
  // 5xx or a timeout (refund_on). settling starts a service of handler,
  // protected by a client that passes each settlement the check API
  // answers to the list it returns, with an estimate of 50.
  const settling = async (handler: RequestListener) => {
    const settlements: Promise<{ cost?: number; estimate?: number; status?: string }>[] = [];
    const recording: typeof fetch = (input, init) => {
      const sent = fetch(input, init);
      if (String(input).endsWith("/v1/settle")) {
        settlements.push(sent.then(async (r) => (await r.clone().json()) as { cost?: number; estimate?: number; status?: string }));
      }
      return sent;
    };
    const holding = new TollgateClient({ baseUrl: apiUrl, serviceToken: seed.service_token, timeoutMs: patientMs, fetch: recording, memorySize: -1 });
    const service = await serve(middleware(holding, { cost: () => 50 }), handler);
    /** settled waits up to 2 s for the nth settlement and returns it. */
    const settled = async (n: number) => {
      await until(() => settlements.length >= n);
      assert.ok(settlements.length >= n, `settlement ${n} was not sent`);
      return settlements[n - 1];
    };
    return { service, settled };
  };

  test("llm: a caller that hangs up after its answer is charged, never refunded as a timeout", async () => {
    // A caller that reads a streamed answer to its end and hangs up before
    // the response has finished was served: it is charged the cost
    // reported, else the estimate.
    const key = await llmKey("ts-e2e-hangup", "ts-e2e-hangup");
    const { service, settled } = await settling((req, res) => {
      const report = req.headers["x-report"];
      if (typeof report === "string") {
        reportCost(req, Number(report));
      }
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      // The handler's tail (closing the upstream stream, logging)
      // outlasts the caller, who has what it came for; then it ends.
      res.write("data: the whole completion\n\ndata: [DONE]\n\n");
      res.once("close", () => setTimeout(() => res.end(), 50));
    });
    try {
      await readAndHangUp(service.url + "/v1/complete", { "X-API-Key": key, "X-Report": "30" });
      const reported = await settled(1);
      assert.deepEqual([reported?.cost, reported?.estimate, reported?.status], [30, 50, "settled"], "a cost reported");
      await readAndHangUp(service.url + "/v1/complete", { "X-API-Key": key });
      const unreported = await settled(2);
      assert.deepEqual([unreported?.cost, unreported?.status], [50, "settled"], "no cost reported: the estimate");
    } finally {
      await close(service.server);
    }
  });

  test("llm: a cost given to writeHead is settled and never reaches the caller", async () => {
    const key = await llmKey("ts-e2e-writehead", "ts-e2e-writehead");
    const { service, settled } = await settling((_req, res) => {
      res.writeHead(200, { "Content-Type": "text/plain", "Tollgate-Cost": "3" });
      res.end("ok");
    });
    try {
      const a = await send(service.url, "POST", "/v1/complete", { "X-API-Key": key });
      assert.equal(a.status, 200);
      assert.equal(a.body, "ok");
      assert.equal(header(a, "Tollgate-Cost"), undefined);
      assert.equal((await settled(1))?.cost, 3);
    } finally {
      await close(service.server);
    }
  });
});

/**
 * readAndHangUp posts to url with headers, reads the answer until it has
 * "[DONE]", and closes the connection before the answer has ended.
 */
function readAndHangUp(url: string, headers: Record<string, string>): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers }, (res) => {
      let got = "";
      res.on("data", (chunk) => {
        got += String(chunk);
        if (got.includes("[DONE]")) {
          req.destroy();
          resolve();
        }
      });
      res.on("end", () => reject(new Error(`the answer ended before the caller hung up: ${res.statusCode} ${got}`)));
    });
    req.on("error", (err) => {
      if (!req.destroyed) {
        reject(err);
      }
    });
    req.end();
  });
}

/** adminSession logs in to the admin API as the demo operator and returns a function that calls it. */
async function adminSession(seed: Seed): Promise<<T = unknown>(method: string, path: string, body?: unknown) => Promise<T>> {
  const call = async <T>(method: string, path: string, body?: unknown, token?: string): Promise<T> => {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    const resp = await fetch(adminUrl + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await resp.text();
    assert.ok(resp.ok, `${method} ${path}: ${resp.status} ${text}`);
    return (text ? JSON.parse(text) : undefined) as T;
  };
  const operator = seed.users.operator;
  assert.ok(operator, "the demo operator");
  const { token } = await call<{ token: string }>("POST", "/api/v1/login", { email: operator.email, password: operator.password });
  return (method, path, body) => call(method, path, body, token);
}

/**
 * expressService starts an Express app that checks every request with
 * client (the cost in X-Cost, else 1; hold as given, else as the rules
 * say) and handles POST path.
 */
async function expressService(client: TollgateClient, path: string, hold?: boolean): Promise<{ url: string; server: Server }> {
  const app = express();
  app.use(middleware(client, { cost: (req) => Number(req.headers["x-cost"] ?? 1), hold }));
  app.post(path, (_req, res) => {
    res.send("handled");
  });
  const server = createServer(app);
  return { url: await listen(server), server };
}

/** issueKey issues a key of the tenant named tenantName and waits until the check API knows it. */
async function issueKey(admin: Awaited<ReturnType<typeof adminSession>>, tenantName: string, name: string): Promise<string> {
  const tenants = await admin<{ items: { id: string; name: string }[] }>("GET", `/api/v1/tenants?q=${tenantName}`);
  const tenant = tenants.items.find((t) => t.name === tenantName);
  assert.ok(tenant, tenantName);
  const issued = await admin<{ secret: string }>("POST", `/api/v1/tenants/${tenant.id}/keys`, { name });
  await waitKnown(issued.secret);
  return issued.secret;
}

/** waitKnown asks until the check API knows key, for up to 2 s: a key issued reaches it within a second. */
async function waitKnown(key: string): Promise<void> {
  const serviceToken = (JSON.parse(seedJSON) as Seed).service_token;
  const client = new TollgateClient({ baseUrl: apiUrl, serviceToken, timeoutMs: patientMs, memorySize: -1 });
  const deadline = Date.now() + 2000;
  for (;;) {
    const d = await client.check({ key, resource: "GET /", dryRun: true });
    if (d.reason !== "invalid_key" || Date.now() > deadline) {
      assert.notEqual(d.reason, "invalid_key", "the new key reached the check API");
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** waitReleases waits for the first n releases to be sent (up to 2 s: each is sent when its response has closed) and answered. */
async function waitReleases(releases: Promise<boolean>[], n: number): Promise<boolean[]> {
  await until(() => releases.length >= n);
  return Promise.all(releases);
}

/** until polls cond every 20 ms until it holds or 2 s have passed (the caller asserts what it waited for). */
async function until(cond: () => boolean): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!cond() && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** waitStatus asks until the answer has the status wanted, for up to 2 s: a key issued or revoked reaches the check API within a second. */
async function waitStatus(ask: () => Promise<Answer>, want: number): Promise<Answer> {
  const deadline = Date.now() + 2000;
  for (;;) {
    const a = await ask();
    if (a.status === want || Date.now() > deadline) {
      assert.equal(a.status, want);
      return a;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
