package testenv

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy for network-fault tests: it listens on a free port
// of 127.0.0.1 and forwards every connection to a target address, with
// faults switched on and off while connections are open:
//
//   - SetLatency delays every chunk of bytes by a duration in each
//     direction (order kept; throughput is not limited);
//   - Blackhole silently drops every byte in both directions while it is
//     on, holding the connections (new ones too) open; turning it off
//     resets the connections that lost bytes (their streams are corrupt,
//     as a real connection would be after its retransmissions gave up) and
//     forwards again;
//   - Reset closes every open connection with an RST (SO_LINGER 0) on both
//     sides;
//   - Partition stops forwarding without losing anything: bytes wait in
//     the kernel's buffers and new connections are accepted but not
//     connected to the target; Heal resumes them all, as TCP does after a
//     partition shorter than its retransmission timeout.
//
// A connection the client or the target closes is closed on the other
// side too. The methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	latency   time.Duration
	blackhole bool
	partition bool
	changed   chan struct{} // closed and replaced when partition turns off
	conns     map[*proxyConn]struct{}
	closed    bool
	accepted  int
	wg        sync.WaitGroup
}

// proxyConn is one client connection and its connection to the target
// (nil until dialled).
type proxyConn struct {
	client net.Conn
	mu     sync.Mutex
	target net.Conn
	lost   bool // bytes were dropped by a blackhole
	closed bool
	once   sync.Once
}

// StartProxy starts a proxy to target; it is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("starting proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy to target; Close stops it.
func NewProxy(target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted returns how many connections the proxy has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// SetLatency delays every chunk by d in each direction (0: none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Blackhole turns the blackhole on or off (see Proxy).
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	var lost []*proxyConn
	if !on {
		for c := range p.conns {
			c.mu.Lock()
			if c.lost {
				lost = append(lost, c)
			}
			c.mu.Unlock()
		}
	}
	p.mu.Unlock()
	for _, c := range lost {
		c.reset()
	}
}

// Reset closes every open connection with an RST on both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Partition stops all forwarding until Heal (see Proxy).
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partition = true
}

// Heal ends a partition: everything held is forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partition {
		p.partition = false
		close(p.changed)
		p.changed = make(chan struct{})
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.Heal()
	p.wg.Wait()
}

// waitFlowing blocks while the proxy is partitioned; it returns false when
// the proxy is closed.
func (p *Proxy) waitFlowing() bool {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return false
		}
		if !p.partition {
			p.mu.Unlock()
			return true
		}
		ch := p.changed
		p.mu.Unlock()
		<-ch
	}
}

func (p *Proxy) state() (latency time.Duration, blackhole bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency, p.blackhole
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &proxyConn{client: client}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	if !p.waitFlowing() {
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	target, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = target.Close()
		return
	}
	c.target = target
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, c.client, target) }()
	go func() { defer wg.Done(); p.pipe(c, target, c.client) }()
	wg.Wait()
}

// chunk is bytes read at a time, due for writing at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst with the proxy's faults until either side fails;
// then it forwards what it holds (for up to the latency and two seconds)
// and closes the connection pair.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn) {
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				time.Sleep(d)
			}
			if !p.waitFlowing() {
				return
			}
			if _, bh := p.state(); bh {
				c.markLost()
				continue
			}
			if _, err := dst.Write(ch.b); err != nil {
				c.close()
				return
			}
		}
	}()
	defer func() {
		close(q)
		lat, _ := p.state()
		select {
		case <-done:
		case <-time.After(lat + 2*time.Second):
		}
		c.close()
		<-done
	}()
	for {
		if !p.waitFlowing() {
			return
		}
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			lat, bh := p.state()
			if bh {
				c.markLost()
			} else {
				select {
				case q <- chunk{b: buf[:n], due: time.Now().Add(lat)}:
				case <-done:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *proxyConn) markLost() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = true
}

// reset closes both sides with an RST.
func (c *proxyConn) reset() {
	c.mu.Lock()
	conns := []net.Conn{c.client, c.target}
	c.mu.Unlock()
	for _, x := range conns {
		if tc, ok := x.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	c.close()
}

// close closes both sides, once.
func (c *proxyConn) close() {
	c.once.Do(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.closed = true
		_ = c.client.Close()
		if c.target != nil {
			_ = c.target.Close()
		}
	})
}
