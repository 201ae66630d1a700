package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
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

// PingPrimary returns a breaker.Config.Ping for the primary that Redis
// Sentinel names master: it asks the sentinels in turn for the primary's
// address (SENTINEL get-master-addr-by-name, on a fresh connection) and
// pings that address as Ping does. After a failover the sentinels name
// the promoted replica, so the breaker closes once the new primary
// answers, not when the dead one comes back.
func PingPrimary(master string, sentinels ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, sentinel := range sentinels {
			addr, err := primaryAddr(ctx, sentinel, master)
			if err == nil {
				if err = redisPing(ctx, addr); err == nil {
					return nil
				}
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// primaryAddr asks the sentinel at addr for the address of the primary
// it knows as master.
func primaryAddr(ctx context.Context, addr, master string) (string, error) {
	if strings.ContainsAny(master, " \r\n") {
		return "", fmt.Errorf("redisstore: sentinel master name %q has a space or line break", master)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("SENTINEL get-master-addr-by-name " + master + "\r\n")); err != nil {
		return "", err
	}
	// The answer is an array of two bulk strings, host and port, or a
	// null array when the sentinel knows no such primary.
	r := bufio.NewReader(conn)
	line := func() (string, error) {
		s, err := r.ReadString('\n')
		return strings.TrimRight(s, "\r\n"), err
	}
	head, err := line()
	if err != nil {
		return "", err
	}
	if head != "*2" {
		return "", fmt.Errorf("redisstore: sentinel %s knows no primary %q (answered %q)", addr, master, head)
	}
	var parts [2]string
	for i := range parts {
		size, err := line()
		if err != nil {
			return "", err
		}
		n, err := strconv.Atoi(strings.TrimPrefix(size, "$"))
		if err != nil || !strings.HasPrefix(size, "$") || n < 0 || n > 255 {
			return "", fmt.Errorf("redisstore: sentinel %s answered %q", addr, size)
		}
		if parts[i], err = line(); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(parts[0], parts[1]), nil
}

// PingConfigured returns the breaker.Config.Ping of a configured Redis:
// PingPrimary when sentinels are listed, Ping of a Cluster's seed nodes
// when they are, Ping of addr otherwise.
func PingConfigured(addr string, cluster []string, master string, sentinels []string) func(ctx context.Context) error {
	switch {
	case len(sentinels) > 0:
		return PingPrimary(master, sentinels...)
	case len(cluster) > 0:
		return Ping(cluster...)
	}
	return Ping(addr)
}
