package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/internal/config"
)

func serveCommand() command {
	return command{
		name:    "serve",
		summary: "run the admin server (TOLLGATE_ADMIN_ADDR)",
		flags: func(fs *flag.FlagSet) func(context.Context, *env) error {
			return func(ctx context.Context, e *env) error {
				cfg := config.New(e.getenv)
				addr := cfg.String("TOLLGATE_ADMIN_ADDR", ":8081")
				if err := cfg.Err(); err != nil {
					return err
				}
				log := slog.New(slog.NewTextHandler(e.stderr, nil))

				// Usage worker (cmd/admin/usage.go): off with TOLLGATE_SERVE_WORKER=false.
				stopWorker, err := startServeWorker(ctx, e, log)
				if err != nil {
					return err
				}
				defer stopWorker()

				srv := &http.Server{Handler: adminRoutes(log, e), ReadHeaderTimeout: 5 * time.Second}
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return fmt.Errorf("TOLLGATE_ADMIN_ADDR=%s: %w", addr, err)
				}
				log.Info("admin listening", "addr", ln.Addr().String())
				errc := make(chan error, 1)
				go func() { errc <- srv.Serve(ln) }()
				select {
				case err := <-errc:
					return err
				case <-ctx.Done():
				}
				shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return srv.Shutdown(shutdown)
			}
		},
	}
}
