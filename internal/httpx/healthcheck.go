package httpx

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Healthcheck asks the server listening on listenAddr (a listen address
// such as ":8080", "0.0.0.0:8080" or "10.0.0.5:8080") for /healthz, over
// loopback unless the address names a specific host, and returns nil when
// it answers 200 within timeout. It is what the binaries' healthcheck
// subcommand runs, for container health checks in images without a shell.
func Healthcheck(ctx context.Context, listenAddr string, timeout time.Duration) error {
	url, err := healthzURL(listenAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s: %s", url, res.Status)
	}
	return nil
}

// healthzURL returns the URL of /healthz on a server listening on addr.
func healthzURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("healthcheck: listen address %q names no port", addr)
	}
	if ip := net.ParseIP(host); host == "" || host == "localhost" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
