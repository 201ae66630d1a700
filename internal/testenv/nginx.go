package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Nginx runs nginx in the foreground with its configuration, pid file,
// logs and temporary files in dir, listening on a free loopback port, and
// returns that address ("127.0.0.1:port"). http returns the body of the
// http block for the listen address it is given (e.g. "listen 127.0.0.1:
// 41234;" belongs in its server block); include paths in it are relative
// to dir. nginx stops when the test ends, and its error log is shown if
// the test failed. Without nginx the test is skipped with a message saying
// what to install, except in CI (CI=true), where it fails: `make test`
// installs Debian's nginx-light when it runs as root.
func Nginx(t testing.TB, dir string, http func(listen string) string) string {
	t.Helper()
	bin := gatewayBinary(t, "nginx", "/usr/sbin/nginx",
		"install Debian's nginx-light (`make test` does, as root) to run the gateway tests")
	errorLog := filepath.Join(dir, "error.log")
	return startListening(t, "nginx", func(addr string) *exec.Cmd {
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, http(addr))
		confPath := filepath.Join(dir, "nginx.conf")
		Must(t, os.WriteFile(confPath, []byte(conf), 0o600))
		_ = os.Remove(errorLog) // only this try's errors
		return exec.Command(bin, "-p", dir+"/", "-c", confPath, "-e", errorLog)
	}, syscall.SIGQUIT, func() string { return fileText(errorLog) })
}
