package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
)

// Ping returns a breaker.Config.Ping for the Redis servers at addrs
// (host:port; one is enough, as for a Cluster's seed nodes): it connects
// afresh, sends PING and takes any reply, even an error such as NOAUTH, as
// the server answering. It uses no client library, so it adds nothing to
// a client's failed dials and logs nothing.
func Ping(addrs ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, addr := range addrs {
			err := redisPing(ctx, addr)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if reply == "" || (reply[0] != '+' && reply[0] != '-') {
		return fmt.Errorf("redisstore: %s answered PING with %q", addr, reply)
	}
	return nil
}
