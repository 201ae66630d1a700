// Generates src/openapi.ts, the wire types of the check API, from the
// project's openapi.yaml. `npm run generate` writes the file;
// test/openapi.test.ts fails when the committed file differs from what
// generateTypes returns, so a change to openapi.yaml must be followed by
// `npm run generate`.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";
import ts from "typescript";

/** The specification, relative to this module (compiled into dist/scripts/). */
export const specURL = new URL("../../../openapi.yaml", import.meta.url);

/** The committed output, relative to this module. */
export const outputURL = new URL("../../src/openapi.ts", import.meta.url);

/**
 * wireSchemas are the schemas the SDK sends and reads: the check API's
 * request and decision, the settlement of a hold, the renewal and release
 * of a lease, an API key's standing (GET /v1/me), and the problem details
 * of its errors. The admin API's schemas are left out: this package does
 * not call it.
 */
export const wireSchemas = [
  "CheckRequest", "Decision", "RuleResult", "CreditsDecision", "Algorithm", "SettleRequest", "Settlement", "LeaseRequest", "Lease",
  "Standing", "RuleStanding", "QuotaStanding", "CreditsStanding", "Problem",
];

const preamble =
  "// The check API's schemas in openapi.yaml: " + wireSchemas.join(", ") + ".\n" +
  "// Regenerate with `npm run generate` after changing openapi.yaml.\n\n";

/**
 * generateTypes returns the TypeScript source of the wire schemas of
 * openapi.yaml, exactly as `npm run generate` writes it. It fails when
 * one of wireSchemas is missing from the specification.
 */
export async function generateTypes(): Promise<string> {
  const spec = await readFile(specURL, "utf8");
  // defaultNonNullable off: a field with a default is optional to send.
  const nodes = await openapiTS(spec, { silent: true, defaultNonNullable: false });
  const components = nodes.find(
    (n): n is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(n) && n.name.text === "components",
  );
  if (components === undefined) {
    throw new Error("openapi.yaml: no components were generated");
  }
  return COMMENT_HEADER + preamble + astToString(onlyWireSchemas(components));
}

/** onlyWireSchemas keeps components.schemas, and of it only wireSchemas. */
function onlyWireSchemas(components: ts.InterfaceDeclaration): ts.InterfaceDeclaration {
  const schemas = components.members.find((m) => memberName(m) === "schemas");
  if (schemas === undefined || !ts.isPropertySignature(schemas) || schemas.type === undefined || !ts.isTypeLiteralNode(schemas.type)) {
    throw new Error("openapi.yaml: components.schemas was not generated as an object type");
  }
  const kept = schemas.type.members.filter((m) => wireSchemas.includes(memberName(m)));
  const missing = wireSchemas.filter((name) => !kept.some((m) => memberName(m) === name));
  if (missing.length > 0) {
    throw new Error(`openapi.yaml: components.schemas has no ${missing.join(", ")}`);
  }
  const f = ts.factory;
  const schemasOut = f.updatePropertySignature(
    schemas, schemas.modifiers, schemas.name, schemas.questionToken, f.updateTypeLiteralNode(schemas.type, f.createNodeArray(kept)),
  );
  return f.updateInterfaceDeclaration(
    components, components.modifiers, components.name, components.typeParameters, components.heritageClauses, [schemasOut],
  );
}

function memberName(m: ts.TypeElement): string {
  return m.name !== undefined && (ts.isIdentifier(m.name) || ts.isStringLiteral(m.name)) ? m.name.text : "";
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv.includes("--write")) {
  await writeFile(outputURL, await generateTypes());
  console.log(`wrote ${fileURLToPath(outputURL)}`);
}
