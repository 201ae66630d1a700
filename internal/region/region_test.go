package region

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/config"
)

func env(vars map[string]string) *config.Env {
	return config.New(func(k string) string { return vars[k] })
}

// TestReadSingleRegion: nothing set is one region, with nothing to
// configure; TOLLGATE_REGIONS alone is a mistake naming TOLLGATE_REGION.
func TestReadSingleRegion(t *testing.T) {
	e := env(nil)
	c := Read(e, true)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || c.Name != "" || c.Names != nil {
		t.Errorf("got %+v, want the zero Config", c)
	}
}

// TestReadRegions: set properly, every setting is read; every bad
// setting is refused naming it.
func TestReadRegions(t *testing.T) {
	good := map[string]string{"TOLLGATE_REGION": "eu", "TOLLGATE_REGIONS": "us, eu,ap", "TOLLGATE_REGION_NATS_URL": "nats://127.0.0.1:4222",
		"TOLLGATE_REGION_EXCHANGE_INTERVAL": "50ms", "TOLLGATE_REGION_LEASE_TTL": "2s", "TOLLGATE_REGION_CHECK_URLS": "us=https://check.us.example/, ap=http://10.0.0.7:8080"}
	e := env(good)
	c := Read(e, true)
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.Name != "eu" || strings.Join(c.Names, ",") != "us,eu,ap" || c.Index("ap") != 2 ||
		c.ExchangeInterval != 50*time.Millisecond || c.RebalanceInterval != DefaultRebalanceInterval || c.LeaseTTL != 2*time.Second ||
		len(c.CheckURLs) != 2 || c.CheckURLs["us"] != "https://check.us.example" || c.CheckURLs["ap"] != "http://10.0.0.7:8080" {
		t.Errorf("got %+v", c)
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		needNATS bool
		field    string
	}{
		{"unknown region", with("TOLLGATE_REGION", "mars"), false, "TOLLGATE_REGION:"},
		{"missing list", with("TOLLGATE_REGIONS", ""), false, "TOLLGATE_REGIONS"},
		{"list without region", with("TOLLGATE_REGION", ""), false, "TOLLGATE_REGION:"},
		{"bad name", with("TOLLGATE_REGIONS", "us,EU West,eu"), false, "TOLLGATE_REGIONS"},
		{"repeated name", with("TOLLGATE_REGIONS", "us,eu,us"), false, "TOLLGATE_REGIONS"},
		{"missing NATS", with("TOLLGATE_REGION_NATS_URL", ""), true, "TOLLGATE_REGION_NATS_URL"},
		{"bad interval", with("TOLLGATE_REGION_EXCHANGE_INTERVAL", "0s"), false, "TOLLGATE_REGION_EXCHANGE_INTERVAL"},
		{"bad rebalance", with("TOLLGATE_REGION_REBALANCE_INTERVAL", "soon"), false, "TOLLGATE_REGION_REBALANCE_INTERVAL"},
		{"lease too short", with("TOLLGATE_REGION_LEASE_TTL", "100ms"), false, "TOLLGATE_REGION_LEASE_TTL"},
		{"check URL of no region", with("TOLLGATE_REGION_CHECK_URLS", "mars=https://check.mars.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL not http", with("TOLLGATE_REGION_CHECK_URLS", "us=ftp://check.us.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL without =", with("TOLLGATE_REGION_CHECK_URLS", "https://check.us.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL with a fragment", with("TOLLGATE_REGION_CHECK_URLS", "us=https://check.us.example#x"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL with an empty query", with("TOLLGATE_REGION_CHECK_URLS", "us=https://check.us.example?"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL with credentials", with("TOLLGATE_REGION_CHECK_URLS", "us=https://u:p@check.us.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL in clear to a name", with("TOLLGATE_REGION_CHECK_URLS", "us=http://check.us.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL in clear to a public address", with("TOLLGATE_REGION_CHECK_URLS", "us=http://203.0.113.7:8080"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URL listed twice", with("TOLLGATE_REGION_CHECK_URLS", "us=https://check.us.example,us=https://other.us.example"), false, "TOLLGATE_REGION_CHECK_URLS"},
		{"check URLs without region", map[string]string{"TOLLGATE_REGION_CHECK_URLS": "us=https://check.us.example"}, false, "TOLLGATE_REGION:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env(tc.vars)
			Read(e, tc.needNATS)
			err := e.Err()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want an error naming %s", err, tc.field)
			}
		})
	}
	// The check server needs no NATS URL.
	e = env(with("TOLLGATE_REGION_NATS_URL", ""))
	Read(e, false)
	if err := e.Err(); err != nil {
		t.Errorf("without NATS, needNATS false: %v", err)
	}
}

// TestValidateScope: an unknown scope, or a global one without regions,
// is refused naming the field.
func TestValidateScope(t *testing.T) {
	one, three := Config{}, Config{Name: "eu", Names: []string{"us", "eu", "ap"}}
	for _, tc := range []struct {
		c     Config
		s     Scope
		valid bool
	}{
		{one, "", true}, {one, Regional, true}, {one, GlobalShared, false}, {one, GlobalSplit, false},
		{three, GlobalShared, true}, {three, GlobalSplit, true}, {three, "global", false}, {one, "eu", false},
	} {
		f := map[string]string{}
		tc.c.ValidateScope("rules[0].region_scope", tc.s, f)
		if got := len(f) == 0; got != tc.valid {
			t.Errorf("%v on %q: got %v, want valid %v", tc.s, tc.c.Name, f, tc.valid)
		}
		if !tc.valid && f["rules[0].region_scope"] == "" {
			t.Errorf("%v: got %v, want the field named", tc.s, f)
		}
	}
}

// TestAllotment: a split's allotments sum to the limit in every region
// count, the remainder to the first regions, the burst in proportion.
func TestAllotment(t *testing.T) {
	for _, tc := range []struct {
		names        []string
		limit, burst int64
	}{
		{[]string{"us", "eu", "ap"}, 1000, 1000},
		{[]string{"us", "eu", "ap"}, 10, 30},
		{[]string{"us", "eu"}, 7, 1},
		{[]string{"us", "eu", "ap"}, 0, 100},
		{[]string{"us", "eu", "ap", "sa"}, 2, 2},
	} {
		var limits, bursts int64
		for _, n := range tc.names {
			l, b := Config{Name: n, Names: tc.names}.Allotment(tc.limit, tc.burst)
			limits += l
			bursts += b
			if tc.limit > 0 && l > 0 && b < 1 {
				t.Errorf("%v %d/%d in %s: burst %d", tc.names, tc.limit, tc.burst, n, b)
			}
		}
		if limits != tc.limit {
			t.Errorf("%v limit %d: allotments sum to %d", tc.names, tc.limit, limits)
		}
		if tc.limit == 0 && bursts != tc.burst {
			t.Errorf("%v one-time %d: bursts sum to %d", tc.names, tc.burst, bursts)
		}
	}
	if l, b := (Config{}).Allotment(1000, 50); l != 1000 || b != 50 {
		t.Errorf("one region: got %d, %d", l, b)
	}
}
