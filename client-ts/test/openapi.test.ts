import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { generateTypes, outputURL } from "../scripts/generate-types.js";

test("src/openapi.ts is what openapi.yaml generates (else run `npm run generate`)", async () => {
  const committed = await readFile(outputURL, "utf8");
  assert.ok(committed === (await generateTypes()), "src/openapi.ts is stale against openapi.yaml: run `npm run generate` in client-ts");
});
