package redistest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name a Sentinel started by StartSentinel
// monitors.
const SentinelMaster = "fgmaster"

// Sentinel is a standalone master watched by one Redis Sentinel, for
// testing clients built with redis.NewFailoverClient.
type Sentinel struct {
	t        testing.TB
	cfg      config
	master   *Server
	sentinel *Server

	mu      sync.Mutex
	clients []*redis.Client
}

// StartSentinel starts a master (as Start does) and a Sentinel process
// monitoring it as SentinelMaster (quorum 1), each on a free loopback port,
// and waits until the Sentinel reports the master's address. Both stop at
// test cleanup.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	m := Start(t, opts...)
	s := newServer(t, cfg, false)
	s.sentinelOf = m.Addr()
	if err := s.startFresh(); err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	sn := &Sentinel{t: t, cfg: cfg, master: m, sentinel: s}
	t.Cleanup(sn.closeClients) // LIFO: before the processes die

	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), DialTimeout: cfg.dialTimeout, ReadTimeout: cfg.ioTimeout})
	defer sc.Close()
	deadline := time.Now().Add(cfg.startTimeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		cancel()
		if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == m.Addr() {
			return sn
		}
		last = fmt.Errorf("get-master-addr-by-name: %v %v", addr, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("redistest: sentinel on %s did not report master %s within %s: %v\n%s", s.Addr(), m.Addr(), cfg.startTimeout, last, s.Log())
	return nil
}

// Master returns the monitored master, for faults and direct commands.
func (s *Sentinel) Master() *Server { return s.master }

// Sentinel returns the Sentinel process.
func (s *Sentinel) Sentinel() *Server { return s.sentinel }

// Addrs returns the Sentinel's address, as FailoverOptions.SentinelAddrs
// wants it.
func (s *Sentinel) Addrs() []string { return []string{s.sentinel.Addr()} }

// Client returns a new go-redis failover client (master discovered through
// the Sentinel), closed at test cleanup.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    SentinelMaster,
		SentinelAddrs: s.Addrs(),
		DialTimeout:   s.cfg.dialTimeout,
		ReadTimeout:   s.cfg.ioTimeout,
		WriteTimeout:  s.cfg.ioTimeout,
		MaxRetries:    1,
		// Honour the context's deadline, as redisstore requires.
		ContextTimeoutEnabled: true,
	})
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

func (s *Sentinel) closeClients() {
	s.mu.Lock()
	cs := s.clients
	s.clients = nil
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}
