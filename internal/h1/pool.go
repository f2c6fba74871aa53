package h1

import (
	"sync"
	"time"
)

// pool keeps idle connections per host: the newest is handed out first
// (LIFO, so that a small steady load keeps few connections warm and the
// rest age out), at most max per host, none idle longer than timeout.
// Its methods may be called from any goroutine.
type pool struct {
	max     int
	timeout time.Duration

	mu    sync.Mutex
	hosts map[string]*idleList // guarded by mu
}

// idleList is one host's idle connections, oldest first. Guarded by the
// pool's mutex.
type idleList struct {
	conns []*conn
	// timer closes connections that outlive the timeout while nobody
	// asks for the host; nil when not armed.
	timer *time.Timer
}

func newPool(max int, timeout time.Duration) *pool {
	return &pool{max: max, timeout: timeout, hosts: map[string]*idleList{}}
}

// get takes the most recently pooled connection to addr, or returns nil.
func (p *pool) get(addr string) *conn {
	p.mu.Lock()
	l := p.hosts[addr]
	if l == nil {
		p.mu.Unlock()
		return nil
	}
	stale := l.expire(time.Now(), p.timeout)
	var pc *conn
	if n := len(l.conns); n > 0 {
		pc = l.conns[n-1]
		l.conns[n-1] = nil
		l.conns = l.conns[:n-1]
	}
	p.mu.Unlock()
	closeConns(stale)
	return pc
}

// put makes pc idle. A host at its maximum loses its oldest connection.
func (p *pool) put(pc *conn) {
	now := time.Now()
	pc.idleSince = now
	p.mu.Lock()
	l := p.hosts[pc.addr]
	if l == nil {
		l = &idleList{}
		p.hosts[pc.addr] = l
	}
	stale := l.expire(now, p.timeout)
	if len(l.conns) >= p.max {
		stale = append(stale, l.conns[0])
		m := copy(l.conns, l.conns[1:])
		l.conns[m] = nil
		l.conns = l.conns[:m]
	}
	l.conns = append(l.conns, pc)
	if l.timer == nil {
		addr := pc.addr
		l.timer = time.AfterFunc(p.timeout, func() { p.sweep(addr, l) })
	}
	p.mu.Unlock()
	closeConns(stale)
}

// sweep runs on l's timer: it closes what has been idle too long and arms
// the timer for the next connection to expire, or retires l when empty.
func (p *pool) sweep(addr string, l *idleList) {
	now := time.Now()
	p.mu.Lock()
	if p.hosts[addr] != l {
		p.mu.Unlock()
		return // closeAll retired it
	}
	stale := l.expire(now, p.timeout)
	if len(l.conns) == 0 {
		delete(p.hosts, addr)
		l.timer = nil
	} else {
		l.timer.Reset(l.conns[0].idleSince.Add(p.timeout).Sub(now))
	}
	p.mu.Unlock()
	closeConns(stale)
}

// expire removes from l the connections idle for timeout or longer at
// now and returns them, to be closed without the lock held.
func (l *idleList) expire(now time.Time, timeout time.Duration) []*conn {
	n := 0
	for n < len(l.conns) && now.Sub(l.conns[n].idleSince) >= timeout {
		n++
	}
	if n == 0 {
		return nil
	}
	stale := append([]*conn(nil), l.conns[:n]...)
	m := copy(l.conns, l.conns[n:])
	clear(l.conns[m:])
	l.conns = l.conns[:m]
	return stale
}

// closeAll closes every idle connection and forgets every host.
func (p *pool) closeAll() {
	var stale []*conn
	p.mu.Lock()
	for addr, l := range p.hosts {
		stale = append(stale, l.conns...)
		if l.timer != nil {
			l.timer.Stop()
		}
		delete(p.hosts, addr)
	}
	p.mu.Unlock()
	closeConns(stale)
}

// idle returns how many connections to addr are idle (for tests).
func (p *pool) idle(addr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.hosts[addr]; l != nil {
		return len(l.conns)
	}
	return 0
}

func closeConns(cs []*conn) {
	for _, pc := range cs {
		pc.nc.Close()
	}
}
