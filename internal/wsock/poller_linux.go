package wsock

import (
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Poller watches sockets for input without a goroutine per socket: an
// epoll set of its own, in which each socket is armed one-shot and level
// triggered (EPOLLIN|EPOLLRDHUP|EPOLLONESHOT). An armed socket that turns
// readable (bytes, the end, an error) is reported once to its Waker and
// then sleeps until armed again; arming one that already has input
// reports it at once.
//
// The set is keyed by the caller's key, never by descriptor: a descriptor
// is reused as soon as it is closed, and closing it takes it out of the
// set (so a closed socket is never reported: whoever closes it must wake
// its owner).
//
// The epoll descriptor itself is non-blocking and handed to the runtime's
// poller (os.NewFile), which reports it readable when the set has
// something ready: one goroutine, parked in the runtime's poller like any
// socket read, serves the whole set, and no thread is dedicated to it.
type Poller struct {
	file *os.File
	set  syscall.RawConn

	mu      sync.Mutex
	closed  bool
	epfd    int
	wakers  map[uint64]Waker // by key, from the first Arm to Forget
	done    chan struct{}    // closed as run returns
	events  [128]syscall.EpollEvent
	ready   int     // events ready in the last wait (run's)
	failed  error   // a wait that failed (run's)
	toWake  []Waker // run's, reused
	waitSet func(fd uintptr) bool

	// Arm's epoll_ctl (armFD): its arguments and result, under mu.
	armFn         func(fd uintptr)
	ev            syscall.EpollEvent
	op, other     int
	wrong, ctlErr syscall.Errno
}

// NewPoller makes a Poller and starts its goroutine; Close stops it.
func NewPoller() (*Poller, error) {
	if !native || portable.Load() {
		return nil, ErrNoPoller
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		syscall.Close(epfd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	// Non-blocking: os.NewFile registers it with the runtime's poller.
	file := os.NewFile(uintptr(epfd), "epoll")
	set, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, err
	}
	p := &Poller{file: file, set: set, epfd: epfd, wakers: map[uint64]Waker{}, done: make(chan struct{})}
	p.waitSet = p.collect
	p.armFn = p.armFD
	go p.run()
	return p, nil
}

// Arm watches sc's socket for input under key, once: the next time it is
// readable (now, if it is already) w.Wake is called, and the socket is
// not reported again until armed again. The socket's descriptor is held
// open while it is armed, so a descriptor reused by another socket is
// never armed by mistake. It fails when the socket or the Poller is
// closed; then nothing will be reported.
func (p *Poller) Arm(sc syscall.RawConn, key uint64, w Waker) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPollerClosed
	}
	p.ev = syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT}
	p.ev.Fd, p.ev.Pad = int32(uint32(key)), int32(uint32(key>>32))
	// A key armed before is in the set (unless its socket was closed,
	// which fails Control): modify it; a new key's socket is added. Either
	// guess that fails is corrected by the other call.
	p.op, p.other, p.wrong = syscall.EPOLL_CTL_ADD, syscall.EPOLL_CTL_MOD, syscall.EEXIST
	if _, armed := p.wakers[key]; armed {
		p.op, p.other, p.wrong = p.other, p.op, syscall.ENOENT
	}
	p.ctlErr = 0
	err := sc.Control(p.armFn)
	ctlErr := p.ctlErr
	if err == nil && ctlErr != 0 {
		err = os.NewSyscallError("epoll_ctl", ctlErr)
	}
	if err != nil {
		return err
	}
	p.wakers[key] = w
	return nil
}

// armFD is Arm's epoll_ctl(2) on the socket fd, made without telling
// the scheduler: it never waits (socket_linux.go says why that is
// cheaper). Its arguments and result are the Poller's, under mu: made
// once, the callback costs an Arm no allocation.
func (p *Poller) armFD(fd uintptr) {
	p.ctlErr = p.ctl(p.op, fd)
	if p.ctlErr == p.wrong {
		p.ctlErr = p.ctl(p.other, fd)
	}
}

// ctl is epoll_ctl(2) of op on fd with p.ev.
func (p *Poller) ctl(op int, fd uintptr) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(p.epfd), uintptr(op), fd, uintptr(unsafe.Pointer(&p.ev)), 0, 0)
	return errno
}

// Forget drops key's Waker: a report that comes for it later (a socket
// armed before it was closed) is ignored. Call it once the key's owner
// is gone for good.
func (p *Poller) Forget(key uint64) {
	p.mu.Lock()
	delete(p.wakers, key)
	p.mu.Unlock()
}

// Close stops the Poller's goroutine and waits for it. Sockets still armed
// are not woken: their owners must be woken by whoever closes them.
func (p *Poller) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.file.Close() // ends run's wait
	<-p.done
}

// run reports ready sockets until the Poller is closed.
func (p *Poller) run() {
	defer close(p.done)
	for {
		if err := p.set.Read(p.waitSet); err != nil || p.failed != nil {
			return
		}
		p.dispatch()
	}
}

// collect takes what is ready in the set without waiting; it returns
// false (wait for the set to turn readable, then call again) when
// nothing is.
func (p *Poller) collect(fd uintptr) bool {
	for {
		// A wait of 0 returns at once: made without telling the
		// scheduler, as this package's other calls that cannot block
		// (socket_linux.go says why that is cheaper).
		r, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd,
			uintptr(unsafe.Pointer(&p.events[0])), uintptr(len(p.events)), 0, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			p.failed = errno
			return true
		}
		p.ready = int(r)
		return r > 0
	}
}

// dispatch wakes the owners of the sockets collect found ready, outside
// the lock (a Waker may arm again).
func (p *Poller) dispatch() {
	p.toWake = p.toWake[:0]
	p.mu.Lock()
	for _, ev := range p.events[:p.ready] {
		key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		if w, ok := p.wakers[key]; ok {
			p.toWake = append(p.toWake, w)
		}
	}
	p.mu.Unlock()
	for i, w := range p.toWake {
		w.Wake()
		p.toWake[i] = nil
	}
}

// Len is how many keys have a Waker (armed at least once, not forgotten).
func (p *Poller) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.wakers)
}
