package redistest

import "testing"

func TestStartProcess(t *testing.T) {
	t.Parallel()
	addr, stop, err := StartProcess()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(addr); err != nil {
		stop()
		t.Fatalf("PING %s: %v", addr, err)
	}
	stop()
	if err := ping(addr); err == nil {
		t.Errorf("%s still answers PING after stop", addr)
	}
	stop() // a second stop does nothing
}

// TestProcessHandleFaults: a Process kills, restarts (same address),
// pauses and resumes its server with errors instead of a test's failures,
// and Stop leaves nothing answering, a paused server included.
func TestProcessHandleFaults(t *testing.T) {
	t.Parallel()
	p, err := StartProcessHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	addr := p.Addr()
	step := func(name string, err error, answers bool) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := ping(addr) == nil; got != answers {
			t.Fatalf("after %s: %s answers PING = %v, want %v", name, addr, got, answers)
		}
	}
	step("start", nil, true)
	pid := p.Pid()
	if pid == 0 {
		t.Fatal("Pid is 0 for a running server")
	}
	step("Kill", p.Kill(), false)
	step("Restart", p.Restart(), true)
	if p.Addr() != addr {
		t.Errorf("restarted on %s, want %s", p.Addr(), addr)
	}
	if p.Pid() == pid || p.Pid() == 0 {
		t.Errorf("pid after Restart = %d, before %d: want a new process", p.Pid(), pid)
	}
	step("Pause", p.Pause(), false)
	step("Resume", p.Resume(), true)
	step("Pause", p.Pause(), false)
	p.Stop()
	step("Stop", nil, false)
	if err := p.Resume(); err == nil {
		t.Error("Resume after Stop: no error")
	}
}

// TestClusterProcess: a cluster started outside a test forms (every
// master answers, the cluster is ok), a master paused by its Process
// stops answering until resumed, and Stop leaves no node answering.
func TestClusterProcess(t *testing.T) {
	t.Parallel()
	p, err := StartClusterProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if len(p.Masters()) != ClusterSize || len(p.Replicas()) != 0 || len(p.Addrs()) != ClusterSize {
		t.Fatalf("%d masters, %d replicas, %d addrs: want %d, 0, %d", len(p.Masters()), len(p.Replicas()), len(p.Addrs()), ClusterSize, ClusterSize)
	}
	if err := p.WaitOK(); err != nil {
		t.Fatal(err)
	}
	m := p.Masters()[1]
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if ping(m.Addr()) == nil {
		t.Error("a paused master answers PING")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := ping(m.Addr()); err != nil {
		t.Errorf("a resumed master: %v", err)
	}
	p.Stop()
	for _, a := range p.Addrs() {
		if ping(a) == nil {
			t.Errorf("%s answers PING after Stop", a)
		}
	}
	p.Stop() // a second Stop does nothing
}
