import type { IncomingMessage } from "node:http";
import { posix } from "node:path";

/** maxResource is the longest resource the check API accepts, in bytes. */
const maxResource = 1024;

/** maxPath leaves room for the method in front of a cleaned path. */
const maxPath = maxResource - 40;

/**
 * ExpressLike is what Express (or a router like it) adds to a request and
 * the middleware reads when present: the URL before mounting, the mount
 * path, the matched route, the caller's address as the app trusts it, and
 * the app, whose "case sensitive routing" setting says how it routes.
 */
export interface ExpressLike {
  originalUrl?: string;
  path?: string;
  baseUrl?: string;
  route?: { path?: unknown };
  ip?: string;
  app?: { get?: (setting: string) => unknown };
}

/** ResourceOptions tunes requestResource. */
export interface ResourceOptions {
  /**
   * Whether paths that differ only in case are different resources.
   * Default: as the framework routes — with Express, its "case sensitive
   * routing" setting (off unless the app sets it, so "/V1/Search" reaches
   * the handler of "/v1/search"); without Express, true. When false, the
   * path is folded to lower case, and the rules' resource patterns must
   * be written in lower case to match.
   */
  caseSensitive?: boolean;
}

/**
 * requestResource returns what a request accesses, as the check API's
 * rules match it: the method (HEAD counted as GET, since it reads what
 * GET reads), a space, and the matched Express route pattern
 * (`req.baseUrl + req.route.path`) with its parameters written as the Go
 * SDK writes a ServeMux pattern's, so that a Go and a Node service name a
 * route alike ("/repos/:owner" is "GET /repos/{owner}", a wildcard
 * "/files/*path" is "GET /files/{path...}"), when the route is known —
 * only once Express has matched one, so not to middleware that
 * `app.use` runs before the routes — else the path cleaned by cleanPath
 * ("GET /repos/octocat") — of a request target in
 * absolute form ("POST http://host/v1/search HTTP/1.1", which Node and
 * Express route by its path) without the scheme and authority. The path
 * is folded to lower case when opts.caseSensitive, or else the app's
 * routing, says case does not matter (see ResourceOptions). It is the
 * middleware's default `resource`.
 */
export function requestResource(req: IncomingMessage & ExpressLike, opts: ResourceOptions = {}): string {
  let method = (req.method ?? "GET").toUpperCase();
  if (method === "HEAD") {
    method = "GET";
  }
  let path = routePattern(req);
  if (path === undefined) {
    const url = withoutOrigin(req.originalUrl ?? req.url ?? "/");
    path = cleanPath(url.split("?", 1)[0] ?? "/");
  }
  if (!(opts.caseSensitive ?? routesCaseSensitively(req))) {
    path = cutBytes(path.toLowerCase(), maxPath);
  }
  return `${method} ${path}`;
}

/**
 * routesCaseSensitively reports whether the framework that received req
 * tells "/V1/Search" from "/v1/search": Express's "case sensitive
 * routing" setting (off by default) when req came through an Express
 * app, else true (node:http hands the path over as it is).
 */
export function routesCaseSensitively(req: ExpressLike): boolean {
  const app = req.app;
  if (app === undefined || typeof app.get !== "function") {
    return true;
  }
  return Boolean(app.get("case sensitive routing"));
}

/** absoluteForm matches the "scheme://authority" of a URL: RFC 3986's scheme, then the authority up to the path, query or fragment. */
const absoluteForm = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;

/**
 * withoutOrigin returns a request target without the scheme and
 * authority of the absolute form, as the check API drops them:
 * "http://host/v1/search?q" is "/v1/search?q", "http://host" is "".
 */
function withoutOrigin(target: string): string {
  return target.replace(absoluteForm, "");
}

/**
 * routePattern returns the Express route pattern that matched req, when
 * there is one and it is a string, with its parameters written as Go's
 * (routeTemplate).
 */
function routePattern(req: ExpressLike): string | undefined {
  const path = req.route?.path;
  if (typeof path !== "string") {
    return undefined;
  }
  let base = req.baseUrl ? cleanPath(req.baseUrl) : "";
  if (base === "/") {
    base = "";
  }
  const pattern = base + routeTemplate(path.startsWith("/") ? path : "/" + path);
  return pattern.length > 1 ? pattern.replace(/\/+$/, "") || "/" : pattern;
}

/**
 * routeParameter matches a parameter of an Express route path not
 * escaped with a backslash: ":name" or a wildcard "*name" (Express 5),
 * the name an identifier or a quoted string (`:"my name"`).
 */
const routeParameter = /(?<!\\)([:*])(?:([$_\p{ID_Start}][$\u200c\u200d\p{ID_Continue}]*)|"((?:[^"\\]|\\.)*)")/gu;

/**
 * routeTemplate returns an Express route path with its parameters written
 * as in a Go ServeMux pattern, the Go SDK's resource: ":owner" is
 * "{owner}", "*path" is "{path...}". The rest, optional groups
 * ("{/:id}") included, is kept as written.
 */
function routeTemplate(path: string): string {
  return path.replace(routeParameter, (_match, kind: string, name: string | undefined, quoted: string | undefined) => {
    const n = name ?? (quoted ?? "").replace(/\\(.)/gu, "$1");
    return kind === ":" ? `{${n}}` : `{${n}...}`;
  });
}

/**
 * cleanPath returns the path rules are matched against, as the check
 * API's forward-auth endpoint cleans it: percent-decoded, with dot
 * segments resolved and repeated and trailing slashes removed, so that
 * /v1//search/, /v1/./search and /v1/%73earch all count as /v1/search
 * (spelling a path differently must not escape its rule). A path that
 * decodes to control characters or invalid UTF-8 stays escaped; one
 * longer than 984 bytes is cut there, on a character boundary.
 */
export function cleanPath(raw: string): string {
  let p = decoded(raw);
  if (p === undefined) {
    p = printable(raw) ? raw : encodeURIComponent(raw);
  }
  p = posix.normalize("/" + p);
  if (p.length > 1 && p.endsWith("/")) {
    p = p.slice(0, -1);
  }
  return cutBytes(p, maxPath);
}

/** decoded percent-decodes raw, or returns undefined when it is not valid UTF-8 or decodes to a control character. */
function decoded(raw: string): string | undefined {
  try {
    const p = decodeURIComponent(raw);
    return printable(p) ? p : undefined;
  } catch {
    return undefined;
  }
}

const controlCharacter = /[\u0000-\u001f\u007f-\u009f]/;

/** printable reports whether s has no control characters and no lone surrogates. */
function printable(s: string): boolean {
  if (controlCharacter.test(s)) {
    return false;
  }
  try {
    encodeURIComponent(s);
    return true;
  } catch {
    return false;
  }
}

/** cutBytes returns the longest start of s, in whole characters, whose UTF-8 form has at most max bytes. */
function cutBytes(s: string, max: number): string {
  if (Buffer.byteLength(s) <= max) {
    return s;
  }
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    bytes += Buffer.byteLength(ch);
    if (bytes > max) {
      break;
    }
    end += ch.length;
  }
  return s.slice(0, end);
}
