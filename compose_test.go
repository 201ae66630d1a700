package tollgate_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	// kin-openapi's YAML parser (over a fork of yaml.v3, merge keys
	// included), as the deploy/ tests use.
	"github.com/oasdiff/yaml"
)

// composeService is the part of a docker-compose service the test reads.
type composeService struct {
	Image       string            `json:"image"`
	Build       any               `json:"build"`
	Entrypoint  []string          `json:"entrypoint"`
	Command     []string          `json:"command"`
	Restart     string            `json:"restart"`
	Environment map[string]string `json:"environment"`
	Ports       []string          `json:"ports"`
	Volumes     []string          `json:"volumes"`
	// StopGracePeriod is how long Docker waits after SIGTERM before it
	// kills the container (Docker's default: 10s).
	StopGracePeriod string `json:"stop_grace_period"`
	Healthcheck     *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
}

// required is compose's ${NAME:?message}: the value must come from the
// environment, and compose refuses to start without it.
var required = regexp.MustCompile(`^\$\{[A-Z0-9_]+:\?[^}]+\}$`)

// TestDockerCompose checks, without a Docker engine, that
// docker-compose.yml keeps the promises that make `docker compose up`
// work the first time and keep working: stores that are really ready
// before anything uses them, one image built once, health checks the
// image can run (it has no shell), restarts, no usage lost with Redis,
// settings that exist and are valid.
func TestDockerCompose(t *testing.T) {
	raw, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]composeService `json:"services"`
		Volumes  map[string]any            `json:"volumes"`
	}
	doc, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if err := json.Unmarshal(doc, &file); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	svc := file.Services
	for _, name := range []string{"postgres", "redis", "migrate", "api", "admin"} {
		if _, ok := svc[name]; !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
	}

	// Postgres is ready when it answers over TCP: on the first start the
	// image's init scripts run a server on the Unix socket only, which
	// pg_isready without -h calls ready, and then restart it.
	if hc := svc["postgres"].Healthcheck; hc == nil || !strings.Contains(strings.Join(hc.Test, " "), "pg_isready") ||
		!strings.Contains(strings.Join(hc.Test, " "), "-h 127.0.0.1") {
		t.Errorf("postgres healthcheck %+v: want pg_isready -h 127.0.0.1", hc)
	}

	// Redis keeps the usage stream (billable usage not applied yet) across
	// restarts: append-only file, on a volume.
	redis := svc["redis"]
	cmd := strings.Join(redis.Command, " ")
	if !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--appendfsync everysec") {
		t.Errorf("redis command %q: want --appendonly yes --appendfsync everysec", cmd)
	}
	if !hasVolume(redis.Volumes, "/data", file.Volumes) {
		t.Errorf("redis volumes %v: want a named volume at /data", redis.Volumes)
	}
	if !hasVolume(svc["postgres"].Volumes, "/var/lib/postgresql/data", file.Volumes) {
		t.Errorf("postgres volumes %v: want a named volume at /var/lib/postgresql/data", svc["postgres"].Volumes)
	}

	// One image, built once: exactly one service builds it, every
	// Tollgate service runs it.
	var builders []string
	for name, s := range svc {
		if s.Build != nil {
			builders = append(builders, name)
		}
	}
	if len(builders) != 1 {
		t.Fatalf("services with a build section: %v; want exactly one", builders)
	}
	image := svc[builders[0]].Image
	if image == "" {
		t.Errorf("%s builds an image without naming it", builders[0])
	}
	for _, name := range []string{"migrate", "api", "admin"} {
		if svc[name].Image != image {
			t.Errorf("%s runs image %q, want the built %q", name, svc[name].Image, image)
		}
	}

	// Health checks run the binaries themselves (the image has no shell),
	// and restart policies bring crashed services back.
	for _, name := range []string{"api", "admin"} {
		s := svc[name]
		bin := "/usr/local/bin/" + name
		if len(s.Entrypoint) == 0 || s.Entrypoint[0] != bin {
			t.Errorf("%s entrypoint %v, want %s", name, s.Entrypoint, bin)
		}
		if s.Healthcheck == nil || !slices.Equal(s.Healthcheck.Test, []string{"CMD", bin, "healthcheck"}) {
			t.Errorf("%s healthcheck %+v, want [CMD %s healthcheck]", name, s.Healthcheck, bin)
		}
		if s.DependsOn["migrate"].Condition != "service_completed_successfully" || s.DependsOn["redis"].Condition != "service_healthy" {
			t.Errorf("%s depends_on %+v: want migrate completed and redis healthy", name, s.DependsOn)
		}
	}
	// SIGTERM drains for up to TOLLGATE_SHUTDOWN_TIMEOUT (10s), then the
	// api publishes its last usage batch for up to as long again: Docker
	// must not kill either server before both are over.
	for _, name := range []string{"api", "admin"} {
		if d, err := time.ParseDuration(svc[name].StopGracePeriod); err != nil || d <= 2*10*time.Second {
			t.Errorf("%s stop_grace_period %q: want more than twice the default TOLLGATE_SHUTDOWN_TIMEOUT (10s)", name, svc[name].StopGracePeriod)
		}
	}
	if svc["migrate"].DependsOn["postgres"].Condition != "service_healthy" {
		t.Errorf("migrate depends_on %+v: want postgres healthy", svc["migrate"].DependsOn)
	}
	for _, name := range []string{"postgres", "redis", "api", "admin"} {
		if r := svc[name].Restart; r != "unless-stopped" && r != "always" {
			t.Errorf("%s restart %q, want unless-stopped or always", name, r)
		}
	}
	if r := svc["migrate"].Restart; r != "on-failure" && r != "no" && r != "" {
		t.Errorf("migrate restart %q: a one-shot job must not restart once done", r)
	}

	// The admin server's secrets: required from the environment (or .env),
	// with no default anyone could read here and use against a deployment.
	adminEnv := svc["admin"].Environment
	for _, name := range []string{"TOLLGATE_ADMIN_JWT_SECRET", "TOLLGATE_SECRET_KEY"} {
		if v := adminEnv[name]; !required.MatchString(v) || !strings.HasPrefix(v, "${"+name+":?") {
			t.Errorf("admin %s %q: want ${%s:?message}, required with no default", name, v, name)
		}
	}
	// A stable worker name: a restarted worker takes back its own batches
	// at once.
	if c := adminEnv["TOLLGATE_USAGE_CONSUMER"]; c == "" || strings.Contains(c, "$") {
		t.Errorf("admin TOLLGATE_USAGE_CONSUMER %q: want a fixed name", c)
	}
	// Both servers are published on loopback only: the admin server is not
	// for the open internet, and the check API belongs behind a gateway.
	for name, addr := range map[string]string{"api": "TOLLGATE_API_ADDR", "admin": "TOLLGATE_ADMIN_ADDR"} {
		_, port, _ := strings.Cut(svc[name].Environment[addr], ":")
		if !slices.Contains(svc[name].Ports, "127.0.0.1:"+port+":"+port) {
			t.Errorf("%s publishes %v: want 127.0.0.1:%s:%s (loopback, the port of %s)", name, svc[name].Ports, port, port, addr)
		}
		for _, p := range svc[name].Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q on every interface; want loopback only", name, p)
			}
		}
	}

	// Every setting the file makes is one the binaries read (the README's
	// configuration table lists them all).
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, v := range regexp.MustCompile("`(TOLLGATE_[A-Z_]+)`").FindAllStringSubmatch(string(readme), -1) {
		documented[v[1]] = true
	}
	for name, s := range svc {
		for v := range s.Environment {
			if strings.HasPrefix(v, "TOLLGATE_") && !documented[v] {
				t.Errorf("%s sets %s, which the README does not document", name, v)
			}
		}
	}

	// The build context leaves out what the image does not need: the git
	// history, local data and binaries.
	ignore, err := os.ReadFile(".dockerignore")
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	lines := strings.Fields(string(ignore))
	for _, want := range []string{".git", ".local/", "bin/", "/api", "/admin", "/loadgen", ".env"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// hasVolume reports whether volumes mounts a named volume (declared in
// declared) at path.
func hasVolume(volumes []string, path string, declared map[string]any) bool {
	for _, v := range volumes {
		name, at, _ := strings.Cut(v, ":")
		if _, ok := declared[name]; ok && strings.TrimSuffix(at, ":rw") == path {
			return true
		}
	}
	return false
}
