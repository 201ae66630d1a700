package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Regions is a test bed of regions on loopback (docs/regions.md, "The
// test bed"): per region a redis-server and a NATS server with
// JetStream, the NATS servers one cluster whose routes all pass through
// toxiproxy, which adds the delay between regions and cuts a region off
// on demand. Each program is built from its Go module (go.mod's tool
// dependencies) into a temporary directory, started on free ports with
// its data in the test's temporary directory, and stopped by its PID
// when the test ends. Nothing leaves loopback.
type Regions struct {
	t       testing.TB
	toxi    string // toxiproxy's API, http://127.0.0.1:port
	Regions []*Region
}

// Region is one region of the bed.
type Region struct {
	Name  string
	Redis *RedisServer
	// NATSURL is the region's NATS server, for its clients
	// (TOLLGATE_REGION_NATS_URL).
	NATSURL string
	// NATS is the NATS server's process.
	NATS *Process
	// proxies are the names of the toxiproxy proxies of the routes from
	// and to the region.
	proxies []string
	// monitor is the NATS server's monitoring address.
	monitor string
}

// natsBuild and toxiproxyBuild build each program once per test binary.
var natsBuild, toxiproxyBuild ToolBuild

// The tool dependencies' versions (go.mod).
const (
	natsVersion      = "v2.15.3"
	toxiproxyVersion = "v2.5.0"
)

// StartRegions starts a region for each name, their NATS servers joined
// in one cluster through toxiproxy with delay of one-way latency on
// every route (0: none). It skips the test in -short mode and when
// redis-server is missing.
func StartRegions(t testing.TB, delay time.Duration, names ...string) *Regions {
	t.Helper()
	if testing.Short() {
		t.Skip("starts three regions")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	natsBin := natsBuild.Binary(t, "github.com/nats-io/nats-server/v2", "nats-server", natsVersion)
	toxiBin := toxiproxyBuild.Binary(t, "github.com/Shopify/toxiproxy/v2/cmd/server", "toxiproxy", toxiproxyVersion)

	b := &Regions{t: t}
	toxiPort := FreePort(t)
	b.toxi = "http://127.0.0.1:" + strconv.Itoa(toxiPort)
	StartProcess(t, "toxiproxy", exec.Command(toxiBin, "-host", "127.0.0.1", "-port", strconv.Itoa(toxiPort)),
		syscall.SIGTERM, 5*time.Second, nil)
	WaitFor(t, 10*time.Second, "toxiproxy's API", func() bool {
		resp, err := http.Get(b.toxi + "/version")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})

	proxyPorts := map[int]bool{}
	cluster := "tollgate-" + RandomID(6)
	clusterPort := map[string]int{}
	for _, n := range names {
		clusterPort[n] = FreePort(t)
	}
	// One side of each pair dials the other: when both did, NATS kept
	// one of the two routes and closed the other as a duplicate, and
	// after a heal now and then closed both and waited a second before
	// its next attempt. Each server dials at least one (JetStream needs a
	// route of its own): i dials j for i < j, but the last dials the
	// first (a ring of three), and two regions dial each other.
	dials := func(i, j int) bool {
		last := len(names) - 1
		switch {
		case i == j:
			return false
		case len(names) == 2:
			return true
		case i == last && j == 0:
			return true
		case i == 0 && j == last:
			return false
		}
		return i < j
	}
	for i, n := range names {
		r := &Region{Name: n, Redis: StartRedisServer(t)}
		var routes []string
		for j, other := range names {
			if dials(j, i) {
				r.proxies = append(r.proxies, other+"-"+n) // made in other's turn
			}
			if !dials(i, j) {
				continue
			}
			// n's route to other: n dials the proxy, which dials other.
			name := n + "-" + other
			port := FreePort(t)
			proxyPorts[port] = true
			listen := "127.0.0.1:" + strconv.Itoa(port)
			b.api("POST", "/proxies", map[string]any{"name": name, "listen": listen,
				"upstream": "127.0.0.1:" + strconv.Itoa(clusterPort[other]), "enabled": true})
			routes = append(routes, "nats-route://"+listen)
			r.proxies = append(r.proxies, name)
		}
		dir := t.TempDir()
		port := FreePort(t)
		r.monitor = FreeAddr(t)
		// Every route passes through toxiproxy: the servers tell each
		// other an address where no one listens (advertise), so that none
		// solicits a route of its own to the address it learns. The
		// cluster's name is the bed's own: should that address come to be
		// another bed's server (tests of several packages run at once, and
		// a free port is free only until someone takes it), the route is
		// refused rather than joining the two beds.
		conf := fmt.Sprintf(`server_name: %[1]s
listen: 127.0.0.1:%[2]d
http: %[6]s
server_tags: ["region:%[1]s"]
jetstream { store_dir: %[3]q, max_memory_store: 64MB, max_file_store: 512MB }
cluster {
  name: %[8]s
  listen: 127.0.0.1:%[4]d
  advertise: "127.0.0.1:%[7]d"
  no_advertise: true
  pool_size: -1
  routes: [%[5]s]
}
`, n, port, filepath.Join(dir, "jetstream"), clusterPort[n], strings.Join(routes, ", "), r.monitor, closedPort(t), cluster)
		path := filepath.Join(dir, "nats.conf")
		Must(t, os.WriteFile(path, []byte(conf), 0o644))
		r.NATS = StartProcess(t, "nats-server "+n, exec.Command(natsBin, "-c", path), syscall.SIGTERM, 10*time.Second, nil)
		r.NATSURL = "nats://127.0.0.1:" + strconv.Itoa(port)
		b.Regions = append(b.Regions, r)
	}
	for _, r := range b.Regions {
		WaitFor(t, 20*time.Second, "nats-server "+r.Name+" listening", func() bool {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(r.NATSURL, "nats://"), time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	for _, r := range b.Regions {
		Eventually(t, time.Now(), 30*time.Second, "nats-server "+r.Name+"'s routes to every region, through toxiproxy", func() (bool, string) {
			return r.routedThrough(proxyPorts, len(names)-1)
		})
	}
	if delay > 0 {
		b.SetDelay(delay)
	}
	return b
}

// Joined reports whether region name's NATS server has its routes to
// every other region (after Heal, once NATS has made them again).
func (b *Regions) Joined(name string) bool {
	r := b.Region(name)
	resp, err := http.Get("http://" + r.monitor + "/routez")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var z struct {
		NumRoutes int `json:"num_routes"`
	}
	return json.NewDecoder(resp.Body).Decode(&z) == nil && z.NumRoutes == len(b.Regions)-1
}

// routedThrough reports whether the region's NATS server has want routes
// and solicited each of its own through a port of proxies.
func (r *Region) routedThrough(proxies map[int]bool, want int) (bool, string) {
	resp, err := http.Get("http://" + r.monitor + "/routez")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var z struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
			DidSolicit bool   `json:"did_solicit"`
			Port       int    `json:"port"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return false, err.Error()
	}
	for _, rt := range z.Routes {
		if rt.DidSolicit && !proxies[rt.Port] {
			return false, fmt.Sprintf("a route to %s on port %d, not through toxiproxy", rt.RemoteName, rt.Port)
		}
	}
	return len(z.Routes) == want, fmt.Sprintf("%d routes", len(z.Routes))
}

// closedPort returns a loopback port where nothing listens (one that
// refuses connections for as long as nothing takes it).
func closedPort(t testing.TB) int { return FreePort(t) }

// Region returns the region named name.
func (b *Regions) Region(name string) *Region {
	for _, r := range b.Regions {
		if r.Name == name {
			return r
		}
	}
	b.t.Fatalf("no region %s", name)
	return nil
}

// SetDelay makes every route between regions take d one way, in both
// directions (0: none).
func (b *Regions) SetDelay(d time.Duration) {
	b.t.Helper()
	for _, r := range b.Regions {
		for _, p := range r.proxies {
			if !strings.HasPrefix(p, r.Name+"-") {
				continue // the other region's side sets it
			}
			for _, stream := range []string{"upstream", "downstream"} {
				name := "delay_" + stream
				b.apiAllow("DELETE", "/proxies/"+p+"/toxics/"+name, nil, http.StatusNotFound)
				if d > 0 {
					b.api("POST", "/proxies/"+p+"/toxics", map[string]any{"name": name, "type": "latency",
						"stream": stream, "attributes": map[string]any{"latency": d.Milliseconds()}})
				}
			}
		}
	}
}

// Partition cuts region name off the others as a partition of the
// network does: nothing passes either way on its routes, which stay open
// (what is sent waits, as TCP's retransmissions do, and flows on Heal).
func (b *Regions) Partition(name string) {
	b.t.Helper()
	for _, p := range b.Region(name).proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			b.api("POST", "/proxies/"+p+"/toxics", map[string]any{"name": "cut_" + stream, "type": "latency",
				"stream": stream, "attributes": map[string]any{"latency": time.Hour.Milliseconds()}})
		}
	}
}

// Disconnect cuts region name off the others by closing its routes (as
// a middlebox that resets connections does); no new one opens until
// Heal, after which NATS makes them again.
func (b *Regions) Disconnect(name string) { b.setEnabled(name, false) }

// Heal joins region name to the others again, after Partition or
// Disconnect (another region cut off and sharing a route with it is
// joined to it too).
func (b *Regions) Heal(name string) {
	b.t.Helper()
	for _, p := range b.Region(name).proxies {
		for _, stream := range []string{"upstream", "downstream"} {
			b.apiAllow("DELETE", "/proxies/"+p+"/toxics/cut_"+stream, nil, http.StatusNotFound)
		}
	}
	b.setEnabled(name, true)
}

func (b *Regions) setEnabled(name string, enabled bool) {
	b.t.Helper()
	for _, p := range b.Region(name).proxies {
		b.api("POST", "/proxies/"+p, map[string]any{"enabled": enabled})
	}
}

// api calls toxiproxy's API, failing the test unless it answers 2xx.
func (b *Regions) api(method, path string, body any) {
	b.t.Helper()
	b.apiAllow(method, path, body)
}

// apiAllow is api, also accepting the statuses allowed.
func (b *Regions) apiAllow(method, path string, body any, allowed ...int) {
	b.t.Helper()
	var buf bytes.Buffer
	if body != nil {
		Must(b.t, json.NewEncoder(&buf).Encode(body))
	}
	req, err := http.NewRequest(method, b.toxi+path, &buf)
	Must(b.t, err)
	resp, err := http.DefaultClient.Do(req)
	Must(b.t, err)
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		for _, s := range allowed {
			if resp.StatusCode == s {
				return
			}
		}
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		b.t.Fatalf("toxiproxy %s %s: %s %s", method, path, resp.Status, msg.String())
	}
}
