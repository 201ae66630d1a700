// The package as npm packs it: `npm pack` in a copy of the sources that
// has never been built must still ship the compiled SDK and its types.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** root is the package's directory (this file runs from dist/test). */
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

test("npm pack builds first: the tarball has the entry point and the types package.json names", { timeout: 180_000 }, async () => {
  const copy = await mkdtemp(join(tmpdir(), "tollgate-client-pack-"));
  try {
    for (const name of ["package.json", "tsconfig.json", "src", "scripts"]) {
      await cp(join(root, name), join(copy, name), { recursive: true });
    }
    await symlink(join(root, "node_modules"), join(copy, "node_modules"), "dir");
    // npm's own script when npm runs the tests, else the npm on PATH.
    const npm = process.env.npm_execpath;
    const [file, args] = npm ? [process.execPath, [npm]] : ["npm", []];
    const { stdout } = await promisify(execFile)(file, [...args, "pack", "--dry-run", "--json"], { cwd: copy, maxBuffer: 16 << 20 });
    const packed = JSON.parse(stdout) as { files: { path: string }[] }[];
    const files = new Set(packed[0]?.files.map((f) => f.path));
    const pkg = JSON.parse(await readFile(join(root, "package.json"), "utf8")) as {
      types?: string;
      exports: { ".": { types: string; import: string } };
    };
    const entry = pkg.exports["."];
    for (const path of [entry.import, entry.types, pkg.types ?? "(no top-level types)"]) {
      assert.ok(files.has(path.replace(/^\.\//, "")), `${path} is not in the tarball: ${[...files].join(", ")}`);
    }
  } finally {
    await rm(copy, { recursive: true, force: true });
  }
});
