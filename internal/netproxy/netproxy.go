// Package netproxy is a TCP proxy for tests that break the network on purpose: it listens on loopback,
// forwards every connection to a target, and on command holds the bytes in both directions (a partition
// whose peers keep their connections open, as a real one does), adds latency, resets or closes every
// connection, or forwards what clients send while dropping what the server answers (the request
// arrived, the reply was lost).
//
//	p, err := netproxy.New("127.0.0.1:5432")
//	defer p.Close()
//	db := open("postgres://...@" + p.Addr() + "/...")
//	p.Partition()            // nothing passes; connections stay open, bytes wait
//	p.Heal()                 // the held bytes go through, in order, as TCP would retransmit them
//
// The proxy reads from both sides at all times, so a partition never blocks a sender: like a network
// that accepted the packets and lost them for a while, and the held bytes (and closes) arrive on Heal.
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its loopback address to a target, with faults on command.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	cond      *sync.Cond
	held      bool          // partitioned: nothing is forwarded, no new upstream connection is made
	dropReply bool          // server→client bytes are read and discarded
	latency   time.Duration // added to every chunk, one way
	links     map[*link]struct{}
	ports     map[int]bool // local ports of every upstream connection made, as the server sees them
	closed    bool
	wg        sync.WaitGroup
}

// New listens on a free loopback port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}, ports: map[int]bool{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port, for clients.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition holds every byte in both directions, on the open connections and on new ones, which are
// accepted but reach the target only after Heal. Connections stay open; a side that closes its end has the
// close held too.
func (p *Proxy) Partition() { p.set(func() { p.held = true }) }

// Heal ends a partition: what was held is forwarded, in order, and held connections are made.
func (p *Proxy) Heal() { p.set(func() { p.held = false }) }

// Partitioned reports whether the proxy holds the bytes.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// SetLatency delays every chunk by d, one way (a round trip takes 2d more); 0 ends the spike.
func (p *Proxy) SetLatency(d time.Duration) { p.set(func() { p.latency = max(d, 0) }) }

// DropReplies turns the dropping of replies on or off: while on, the proxy forwards what clients send and
// discards what the target answers, as for a request that arrived whose reply was lost.
func (p *Proxy) DropReplies(on bool) { p.set(func() { p.dropReply = on }) }

// Reset closes every open connection with a TCP RST on both sides, as a middlebox that lost its state does.
func (p *Proxy) Reset() { p.closeLinks(true) }

// CloseAll closes every open connection on both sides, with a FIN.
func (p *Proxy) CloseAll() { p.closeLinks(false) }

// Upstream reports whether port is the local port of an upstream connection the proxy made (the
// client_port a PostgreSQL server shows for it in pg_stat_activity).
func (p *Proxy) Upstream(port int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ports[port]
}

// Ports are the local ports of every upstream connection the proxy made, open or closed.
func (p *Proxy) Ports() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	ports := make([]int, 0, len(p.ports))
	for port := range p.ports {
		ports = append(ports, port)
	}
	return ports
}

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.CloseAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{p: p, client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(l.run)
	}
}

func (p *Proxy) closeLinks(rst bool) {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.kill(rst)
	}
}

// chunk is what one read returned, with when it was read; eof marks the end of the stream.
type chunk struct {
	b   []byte
	at  time.Time
	eof bool
}

// link is one proxied connection: the client's and, once made, the upstream one.
type link struct {
	p        *Proxy
	client   net.Conn
	upstream net.Conn  // set once dialled (under p.mu)
	up, down []chunk   // client→server and server→client chunks not yet written (under p.mu)
	dead     bool      // killed, or a side failed (under p.mu)
	once     sync.Once // the conns are closed once
	rst      bool      // close with RST
	done     sync.WaitGroup
}

func (l *link) run() {
	p := l.p
	l.done.Go(func() { l.read(l.client, &l.up, false) }) // bytes the client sends wait for the upstream
	// The upstream connection is made once the proxy is not partitioned: a SYN does not cross a partition.
	p.mu.Lock()
	for p.held && !l.dead {
		p.cond.Wait()
	}
	dead := l.dead
	p.mu.Unlock()
	if dead {
		l.done.Wait()
		l.finish()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		l.kill(true)
		l.done.Wait()
		l.finish()
		return
	}
	p.mu.Lock()
	l.upstream = up
	if a, ok := up.LocalAddr().(*net.TCPAddr); ok {
		p.ports[a.Port] = true
	}
	dead = l.dead
	p.cond.Broadcast()
	p.mu.Unlock()
	if dead {
		_ = up.Close()
		l.done.Wait()
		l.finish()
		return
	}
	l.done.Go(func() { l.read(up, &l.down, true) })
	l.done.Go(func() { l.write(up, &l.up) })
	l.done.Go(func() { l.write(l.client, &l.down) })
	l.done.Wait()
	l.finish()
}

// read reads src into q until src ends; reply marks the server→client direction, which DropReplies cuts.
func (l *link) read(src net.Conn, q *[]chunk, reply bool) {
	p := l.p
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		p.mu.Lock()
		if n > 0 && (!reply || !p.dropReply) {
			*q = append(*q, chunk{b: buf[:n], at: time.Now()})
		}
		if err != nil && !l.dead {
			// The end of the stream (a FIN, or a reset by the peer) is forwarded in order, and held by a
			// partition like the bytes before it.
			*q = append(*q, chunk{at: time.Now(), eof: true})
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// write forwards q to dst while the proxy is not partitioned, each chunk no earlier than the latency
// after it was read; after an EOF chunk it half-closes dst.
func (l *link) write(dst net.Conn, q *[]chunk) {
	p := l.p
	for {
		p.mu.Lock()
		for !l.dead && (len(*q) == 0 || p.held) {
			p.cond.Wait()
		}
		if l.dead {
			p.mu.Unlock()
			l.closeConns()
			return
		}
		c := (*q)[0]
		*q = (*q)[1:]
		latency := p.latency
		p.mu.Unlock()
		if wait := time.Until(c.at.Add(latency)); wait > 0 {
			time.Sleep(wait) // the network's delay
		}
		if c.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			l.kill(true)
			return
		}
	}
}

// kill ends the link: its connections are closed (with RST when rst) and its goroutines stop.
func (l *link) kill(rst bool) {
	p := l.p
	p.mu.Lock()
	l.dead = true
	l.rst = l.rst || rst
	p.cond.Broadcast()
	p.mu.Unlock()
	l.closeConns()
}

func (l *link) closeConns() {
	l.once.Do(func() {
		p := l.p
		p.mu.Lock()
		rst, up := l.rst, l.upstream
		p.mu.Unlock()
		for _, c := range []net.Conn{l.client, up} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && rst {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// finish closes what is left and forgets the link.
func (l *link) finish() {
	l.p.mu.Lock()
	up := l.upstream
	delete(l.p.links, l)
	l.p.mu.Unlock()
	_ = l.client.Close()
	if up != nil {
		_ = up.Close()
	}
}
