package netproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line; it counts the connections it accepted and the lines
// it read.
type echoServer struct {
	ln    net.Listener
	conns atomic.Int64
	lines atomic.Int64
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.lines.Add(1)
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func setup(t *testing.T) (*echoServer, *Proxy) {
	t.Helper()
	s := newEcho(t)
	p, err := New(s.ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return s, p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads the answer within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	s, err := r.ReadString('\n')
	if len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // a poll step
	}
}

func TestForward(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c, r := dial(t, p)
	got, err := roundTrip(c, r, "hello", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hello", got)
	require.Equal(t, int64(1), s.conns.Load())
	require.Equal(t, 1, p.Conns())
	ports := p.Ports()
	require.Len(t, ports, 1)
	require.True(t, p.Upstream(ports[0]))
}

// TestPartitionHoldsThenHeals: nothing crosses a partition in either direction, the connection stays
// open, and on Heal what was held arrives in order.
func TestPartitionHoldsThenHeals(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "before", 5*time.Second)
	require.NoError(t, err)

	p.Partition()
	require.True(t, p.Partitioned())
	_, err = roundTrip(c, r, "one", 300*time.Millisecond)
	require.True(t, isTimeout(err), "no answer across the partition: %v", err)
	_, err = c.Write([]byte("two\n"))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.lines.Load(), "the server got nothing during the partition")

	// A new connection during the partition is accepted but does not reach the server.
	c2, r2 := dial(t, p)
	_, err = c2.Write([]byte("late\n"))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.conns.Load())

	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"one", "two"} {
		got, err := r.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, want+"\n", got)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r2.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "late\n", got)
	require.Equal(t, int64(2), s.conns.Load())
}

// TestPartitionHoldsClose: a client that gives up and closes during a partition: the server sees the close
// only after Heal.
func TestPartitionHoldsClose(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "x", 5*time.Second)
	require.NoError(t, err)
	p.Partition()
	require.NoError(t, c.Close())
	// Still one link: the close waits with the partition.
	require.Never(t, func() bool { return p.Conns() == 0 }, 300*time.Millisecond, 20*time.Millisecond)
	p.Heal()
	waitFor(t, "the link to end after the heal", func() bool { return p.Conns() == 0 })
}

func TestDropReplies(t *testing.T) {
	t.Parallel()
	s, p := setup(t)
	c, r := dial(t, p)
	p.DropReplies(true)
	_, err := roundTrip(c, r, "lost", 300*time.Millisecond)
	require.True(t, isTimeout(err), "the reply is dropped: %v", err)
	waitFor(t, "the request to arrive", func() bool { return s.lines.Load() == 1 })
	p.DropReplies(false)
	got, err := roundTrip(c, r, "kept", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "kept", got, "the dropped reply never arrives")
}

func TestLatency(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c, r := dial(t, p)
	p.SetLatency(150 * time.Millisecond)
	start := time.Now()
	_, err := roundTrip(c, r, "slow", 5*time.Second)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "two ways of latency")
	p.SetLatency(0)
	_, err = roundTrip(c, r, "fast", 5*time.Second)
	require.NoError(t, err)
}

func TestReset(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "x", 5*time.Second)
	require.NoError(t, err)
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = r.ReadString('\n')
	require.True(t, errors.Is(err, syscall.ECONNRESET), "a reset: %v", err)
	waitFor(t, "no links", func() bool { return p.Conns() == 0 })
	c2, r2 := dial(t, p)
	_, err = roundTrip(c2, r2, "again", 5*time.Second)
	require.NoError(t, err, "new connections work after a reset")
}

func TestCloseAll(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c, r := dial(t, p)
	_, err := roundTrip(c, r, "x", 5*time.Second)
	require.NoError(t, err)
	p.CloseAll()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = r.ReadString('\n')
	require.ErrorIs(t, err, io.EOF)
}
