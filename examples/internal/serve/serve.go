// Package serve is the plumbing the example services share: their
// settings, the check API's client, and serving until a signal. What each
// example shows of the SDK is in its own routes.
package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/client"
)

// Main runs the service name (Run with the process's environment) and
// exits with status 1 when it fails.
func Main(name, defaultAddr string, routes func(*client.Client) http.Handler) {
	if err := Run(context.Background(), name, defaultAddr, routes, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Run serves the handler routes builds on a client of the check API until
// SIGINT or SIGTERM (or ctx ends), then shuts down gracefully (the
// server, then the client's settlements still under way). Settings:
// TOLLGATE_URL (the check API), TOLLGATE_SERVICE_TOKEN, and ADDR (default
// defaultAddr), read with getenv; a missing or unusable one is an error
// naming it.
func Run(ctx context.Context, name, defaultAddr string, routes func(*client.Client) http.Handler,
	getenv func(string) string, stderr io.Writer) error {
	for _, setting := range []string{"TOLLGATE_URL", "TOLLGATE_SERVICE_TOKEN"} {
		if getenv(setting) == "" {
			return fmt.Errorf("%s is not set", setting)
		}
	}
	tg, err := client.New(getenv("TOLLGATE_URL"), getenv("TOLLGATE_SERVICE_TOKEN"), client.Options{})
	if err != nil {
		return fmt.Errorf("TOLLGATE_URL: %w", err)
	}
	srv := &http.Server{Addr: cmp.Or(getenv("ADDR"), defaultAddr), Handler: routes(tg), ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(stderr, "%s: listening on %s, checking with %s\n", name, srv.Addr, getenv("TOLLGATE_URL"))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// The settlements and releases of the last responses run after them:
	// wait for those too, or the service's last holds bill their estimate.
	return tg.Shutdown(shutdown)
}
