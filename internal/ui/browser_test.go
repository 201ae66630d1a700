package ui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// The console's tests drive a real browser: Debian's chromium, headless,
// over the DevTools protocol (chromedp). `make test` installs chromium
// when it is missing (scripts/services.sh); without it the browser tests
// skip, except in CI (CI=true), where a missing browser fails them.

// chromiumPath returns the browser to drive: $TOLLGATE_CHROMIUM, or the
// first of the usual names on $PATH.
func chromiumPath() string {
	if p := os.Getenv("TOLLGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browserTimeout bounds one browser step: generous, for a slow shared
// machine; steps wait for what they need rather than sleep.
const browserTimeout = 45 * time.Second

// browser is one headless Chromium (its own profile: its own cookies),
// on one tab, pointed at an admin server.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	// shots is where screenshots go ($TOLLGATE_SCREENSHOTS, else the
	// test's temporary directory).
	shots string
}

// newBrowser starts a browser for base (the admin server's URL) and stops
// it when the test ends.
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium found (set TOLLGATE_CHROMIUM or install Debian's chromium): CI runs the browser tests")
		}
		t.Skip("no chromium found: install chromium (make test does with apt-get) or set TOLLGATE_CHROMIUM to run the browser tests")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.WindowSize(1280, 900),
		chromedp.DisableGPU,
		chromedp.Flag("lang", "en-US"),
		chromedp.UserDataDir(t.TempDir()),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses its sandbox as root
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithLogf(func(string, ...any) {}))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, base: base, shots: os.Getenv("TOLLGATE_SCREENSHOTS")}
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	// The first action starts the browser; it must not run under a
	// timeout, which would end the browser with it.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return b
}

// do runs steps, failing the test on an error or after browserTimeout.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.pageText())
	}
}

// pageText is the current page's URL and text, for failure messages.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	return fmt.Sprintf("page %s:\n%s", loc, text)
}

// open loads path and waits for its main content.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("main")))
}

// fill sets the form fields (CSS selector → value), as typing would:
// with input and change events, so that the page's script sees them.
func (b *browser) fill(fields map[string]string) {
	b.t.Helper()
	for sel, v := range fields {
		b.do("find "+sel, chromedp.WaitReady(chromedp.CSS(sel)))
		ok := eval[bool](b, fmt.Sprintf(`(el => { if (!el) return false; el.value = %q;
			el.dispatchEvent(new Event("input", {bubbles: true})); el.dispatchEvent(new Event("change", {bubbles: true}));
			return el.value === %q; })(document.querySelector(%q))`, v, v, sel))
		if !ok {
			b.t.Fatalf("fill %s with %q: the field does not take it\n%s", sel, v, b.pageText())
		}
	}
}

// click clicks sel and waits for waitFor to be visible on the page that
// follows.
func (b *browser) click(sel, waitFor string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS(waitFor)))
}

// press clicks sel and waits for nothing.
func (b *browser) press(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// text returns the text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v\n%s", sel, err, b.pageText())
	}
	return strings.TrimSpace(s)
}

// count returns how many elements match sel now (it does not wait).
func (b *browser) count(sel string) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// location returns the current URL's path and query.
func (b *browser) location() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		b.t.Fatalf("location: %v", err)
	}
	return strings.TrimPrefix(loc, b.base)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// status fetches path from the page (with the browser's cookies) and
// returns the HTTP status: for URLs that are not meant to be visited.
func (b *browser) status(method, path, body string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`fetch(%q, {method: %q, body: %s, redirect: "manual",
		headers: {"Content-Type": "application/x-www-form-urlencoded"}}).then(r => r.status)`, path, method, jsString(body, method)))
}

func jsString(s, method string) string {
	if method == "GET" || method == "HEAD" {
		return "undefined"
	}
	return fmt.Sprintf("%q", s)
}

// darkMode switches the page's prefers-color-scheme.
func (b *browser) darkMode(dark bool) {
	b.t.Helper()
	scheme := "light"
	if dark {
		scheme = "dark"
	}
	b.do("color scheme "+scheme, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	}))
}

// screenshot saves the whole page as <name>.png in the screenshot
// directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// cookies returns the browser's cookies by name.
func (b *browser) cookies() map[string]*network.Cookie {
	b.t.Helper()
	out := map[string]*network.Cookie{}
	b.do("cookies", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		res, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{})
		for _, c := range res.Cookies {
			out[c.Name] = c
		}
		return err
	}))
	return out
}
