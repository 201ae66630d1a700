package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Caddy runs caddy with the Caddyfile that site returns for a free
// loopback address ("127.0.0.1:port"), and returns that address. The
// Caddyfile starts with global options that keep caddy to itself (no
// admin endpoint, no automatic HTTPS) and is written to dir, where
// import paths are relative to and where caddy keeps its data and
// configuration instead of the user's home. env is added to caddy's
// environment ("NAME=value", for {$NAME} in the Caddyfile). caddy stops
// when the test ends, and its output is shown if the test failed. Without
// caddy the test is skipped with a message saying what to install, except
// in CI (CI=true), where it fails: `make test` installs Debian's caddy
// when it runs as root.
func Caddy(t testing.TB, dir string, env []string, site func(addr string) string) string {
	t.Helper()
	bin := gatewayBinary(t, "caddy", "/usr/bin/caddy",
		"install Debian's caddy (`make test` does, as root) to run the gateway tests")
	return startListening(t, "caddy", func(addr string) *exec.Cmd {
		conf := "{\n\tadmin off\n\tauto_https off\n}\n" + site(addr)
		path := filepath.Join(dir, "Caddyfile")
		Must(t, os.WriteFile(path, []byte(conf), 0o600))
		cmd := exec.Command(bin, "run", "--adapter", "caddyfile", "--config", path)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
		cmd.Env = append(cmd.Env, env...)
		return cmd
	}, syscall.SIGTERM, func() string { return "" })
}
