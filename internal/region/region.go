// Package region holds a deployment's regions: which region a process
// serves, the list of every region, and the exchange's settings
// (docs/regions.md). It reads them from TOLLGATE_REGION* settings and
// links nothing but the standard library, internal/config and the
// limiter (a leaf), so the check server may read it without linking the
// exchange's transport, which lives in region/exchange and runs in the
// admin worker.
package region

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/limiter"
)

// Scope says which consistency a rule gets across regions.
type Scope string

// Scopes. The zero value is Regional.
const (
	// Regional: each region enforces the rule on its own (the default).
	Regional Scope = "regional"
	// GlobalShared: each region decides on its own count plus the other
	// regions' last known admissions, exchanged every interval.
	GlobalShared Scope = "global_shared"
	// GlobalSplit: the limit is divided into regional allotments that
	// never sum to more than the limit.
	GlobalSplit Scope = "global_split"
)

// Scopes lists every scope in the order the console offers them.
var Scopes = []Scope{Regional, GlobalShared, GlobalSplit}

// Global reports whether s is exchanged between regions.
func (s Scope) Global() bool { return s == GlobalShared || s == GlobalSplit }

// Config is a process's region settings. The zero value is a deployment
// of one region: nothing is exchanged and every rule is regional.
type Config struct {
	// Name is this process's region (TOLLGATE_REGION); "" for a
	// deployment of one region.
	Name string
	// Names lists every region (TOLLGATE_REGIONS), the same everywhere,
	// Name among them.
	Names []string
	// NATSURL is the region's NATS server (TOLLGATE_REGION_NATS_URL),
	// which only the exchanger dials.
	NATSURL string
	// ExchangeInterval is E, how often each region's admissions on
	// global rules are sent to the others (default 100 ms).
	ExchangeInterval time.Duration
	// RebalanceInterval is how often split allotments follow demand
	// (default 1 s).
	RebalanceInterval time.Duration
	// LeaseTTL is how long a region's exchange lease lasts unrenewed
	// (TOLLGATE_REGION_LEASE_TTL, default 3 s): a worker standing by
	// takes the exchange over within it and a third of it when the
	// exchanging worker dies.
	LeaseTTL time.Duration
	// CheckURLs are the other regions' check APIs by region
	// (TOLLGATE_REGION_CHECK_URLS), where a settlement of a hold another
	// region keeps is forwarded; a region without one answers such a
	// settlement not found, naming the hold's region.
	CheckURLs map[string]string
}

// Defaults of the intervals.
const (
	DefaultExchangeInterval  = 100 * time.Millisecond
	DefaultRebalanceInterval = time.Second
	DefaultLeaseTTL          = 3 * time.Second
)

// Enabled reports whether the deployment has regions.
func (c Config) Enabled() bool { return c.Name != "" }

// Index returns the position of name in Names, or -1.
func (c Config) Index(name string) int { return slices.Index(c.Names, name) }

var regionName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// Read reads TOLLGATE_REGION, TOLLGATE_REGIONS, TOLLGATE_REGION_NATS_URL,
// TOLLGATE_REGION_EXCHANGE_INTERVAL, TOLLGATE_REGION_REBALANCE_INTERVAL,
// TOLLGATE_REGION_LEASE_TTL and TOLLGATE_REGION_CHECK_URLS through e, recording a problem naming
// the setting for: a region unset while the others are set, a list
// missing or of bad or repeated names, a region not in the list, a NATS
// URL missing where needNATS (the exchanger needs it; the check server
// does not), a check URL of no region or not http(s), or intervals not
// positive. With TOLLGATE_REGION unset and nothing else set it returns
// the zero Config.
func Read(e *config.Env, needNATS bool) Config {
	c := Config{
		Name:              e.String("TOLLGATE_REGION", ""),
		Names:             e.List("TOLLGATE_REGIONS"),
		NATSURL:           e.String("TOLLGATE_REGION_NATS_URL", ""),
		ExchangeInterval:  e.Duration("TOLLGATE_REGION_EXCHANGE_INTERVAL", DefaultExchangeInterval),
		RebalanceInterval: e.Duration("TOLLGATE_REGION_REBALANCE_INTERVAL", DefaultRebalanceInterval),
		LeaseTTL:          e.Duration("TOLLGATE_REGION_LEASE_TTL", DefaultLeaseTTL),
	}
	urls := e.List("TOLLGATE_REGION_CHECK_URLS")
	if c.Name == "" {
		if len(c.Names) > 0 || c.NATSURL != "" || len(urls) > 0 {
			e.Fail("TOLLGATE_REGION", "must name this process's region (one of TOLLGATE_REGIONS) when TOLLGATE_REGIONS, TOLLGATE_REGION_NATS_URL or TOLLGATE_REGION_CHECK_URLS is set")
		}
		return Config{}
	}
	if len(c.Names) == 0 {
		e.Fail("TOLLGATE_REGIONS", fmt.Sprintf("must list every region (comma-separated, the same list everywhere) when TOLLGATE_REGION is set (%q)", c.Name))
		return c
	}
	for i, n := range c.Names {
		switch {
		case !regionName.MatchString(n):
			e.Fail("TOLLGATE_REGIONS", fmt.Sprintf("%q: a region's name is 1–32 lower-case letters, digits or '-', starting with a letter or digit", n))
		case slices.Index(c.Names, n) != i:
			e.Fail("TOLLGATE_REGIONS", fmt.Sprintf("%q is listed twice", n))
		}
	}
	if c.Index(c.Name) < 0 {
		e.Fail("TOLLGATE_REGION", fmt.Sprintf("%q is not a region of TOLLGATE_REGIONS (%s)", c.Name, strings.Join(c.Names, ", ")))
	}
	if c.LeaseTTL < 300*time.Millisecond {
		e.Fail("TOLLGATE_REGION_LEASE_TTL", fmt.Sprintf("%v: at least 300ms (the exchanging worker renews it every third of it)", c.LeaseTTL))
	}
	for _, entry := range urls {
		name, raw, _ := strings.Cut(entry, "=")
		u, err := url.Parse(raw)
		switch {
		case c.Index(name) < 0:
			e.Fail("TOLLGATE_REGION_CHECK_URLS", fmt.Sprintf("%q: each entry is region=URL, the region one of TOLLGATE_REGIONS (%s)", entry, strings.Join(c.Names, ", ")))
		case c.CheckURLs[name] != "":
			e.Fail("TOLLGATE_REGION_CHECK_URLS", fmt.Sprintf("%q: region %s is listed twice", entry, name))
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" ||
			u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
			e.Fail("TOLLGATE_REGION_CHECK_URLS", fmt.Sprintf("%q: region %s's check API is an http(s) URL without credentials, query or fragment, e.g. https://check.%s.example.com", entry, name, name))
		case u.Scheme == "http" && !privateHost(u.Hostname()):
			e.Fail("TOLLGATE_REGION_CHECK_URLS", fmt.Sprintf("%q: the caller's service token goes with a forwarded call: use https, or plain http only to a loopback or private IP address", entry))
		default:
			if c.CheckURLs == nil {
				c.CheckURLs = map[string]string{}
			}
			c.CheckURLs[name] = strings.TrimRight(raw, "/")
		}
	}
	if needNATS && c.NATSURL == "" {
		e.Fail("TOLLGATE_REGION_NATS_URL", fmt.Sprintf("must name region %s's NATS server (e.g. nats://127.0.0.1:4222) when TOLLGATE_REGION is set", c.Name))
	}
	return c
}

// ValidateScope records under field a problem with a rule's scope s on
// this deployment: an unknown scope, or a global one on a deployment
// without regions. "" is Regional.
func (c Config) ValidateScope(field string, s Scope, f map[string]string) {
	switch s {
	case "", Regional:
	case GlobalShared, GlobalSplit:
		if !c.Enabled() {
			f[field] = fmt.Sprintf("%s needs a deployment of several regions (TOLLGATE_REGION and TOLLGATE_REGIONS are not set): use regional or leave it out", s)
		}
	default:
		f[field] = "must be regional, global_shared or global_split"
	}
}

// Allotment returns this region's equal part of a global_split rule's
// limit and burst (AllotmentOf its Name).
func (c Config) Allotment(limit, burst int64) (int64, int64) {
	return c.AllotmentOf(c.Name, limit, burst)
}

// AllotmentOf returns region name's equal part of a global_split rule's
// limit and burst: the limit divided equally, the remainder going one
// unit each to the first regions of Names, and the burst in the same
// proportion (at least 1 while the allotment is). The allotments of
// every region sum to the limit, so the regions together never admit
// more than it; the rebalancer moves units between them from there
// (docs/regions.md). Outside a deployment of regions, or for a name not
// in Names, it returns limit and burst.
func (c Config) AllotmentOf(name string, limit, burst int64) (int64, int64) {
	n := int64(len(c.Names))
	i := int64(c.Index(name))
	if !c.Enabled() || n == 0 || i < 0 {
		return limit, burst
	}
	share := limit / n
	if i < limit%n {
		share++
	}
	if limit == 0 { // a one-time allowance: the burst is what is split
		b := burst / n
		if i < burst%n {
			b++
		}
		return 0, b
	}
	b := burst * share / limit
	if b < 1 && share > 0 {
		b = 1
	}
	return share, b
}

// Rebalanced reports whether a global_split rule of algorithm a has its
// allotments follow demand: a window (fixed, sliding log, sliding
// counter), whose count the rebalancer can keep each region's allotment
// above. A bucket's allotments stay equal.
func Rebalanced(a limiter.Algorithm) bool {
	switch a {
	case limiter.FixedWindow, limiter.SlidingWindowLog, limiter.SlidingWindowCounter:
		return true
	}
	return false
}

// MinShare returns the least allotment a region keeps of a global_split
// rule of limit with min_share minShare: minShare, or when 0 the default
// limit / (4 · regions).
func (c Config) MinShare(limit, minShare int64) int64 {
	if minShare > 0 || len(c.Names) == 0 {
		return minShare
	}
	return limit / (4 * int64(len(c.Names)))
}

// privateHost reports whether host is localhost or a loopback or private
// IP address (RFC 1918, RFC 4193), where a forwarded call may go over
// plain http. A name other than localhost is not resolved: it needs https.
func privateHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && (ip.IsLoopback() || ip.IsPrivate())
}
