package bus

import (
	"context"
	"sync"

	"github.com/rtserver/rtserver/metrics"
)

// MemoryBroker connects Memory buses in one process, as if they were
// instances sharing a Redis. Tests use it to run several servers in one
// process; the standalone single instance needs none.
type MemoryBroker struct {
	mu    sync.RWMutex
	buses []*Memory
}

// NewMemoryBroker returns an empty broker.
func NewMemoryBroker() *MemoryBroker { return &MemoryBroker{} }

// Memory is the in-process bus: the embedded default for a single instance
// (broker nil: nothing leaves the process), or one of several instances on a
// MemoryBroker. Delivery to siblings is synchronous and in publish order.
type Memory struct {
	broker *MemoryBroker
	m      *metrics.Metrics

	mu   sync.RWMutex
	recv Receiver
}

// NewMemory returns a memory bus attached to broker (which may be nil). m
// nil means metrics.NewDiscard().
func NewMemory(broker *MemoryBroker, m *metrics.Metrics) *Memory {
	if m == nil {
		m = metrics.NewDiscard()
	}
	return &Memory{broker: broker, m: m}
}

func (b *Memory) Start(_ context.Context, r Receiver) error {
	b.mu.Lock()
	b.recv = r
	b.mu.Unlock()
	if b.broker != nil {
		b.broker.mu.Lock()
		b.broker.buses = append(b.broker.buses, b)
		b.broker.mu.Unlock()
	}
	return nil
}

func (b *Memory) Publish(topic string, data []byte) error {
	b.each(func(r Receiver) { r.Deliver(topic, data) })
	return nil
}

// PublishControl hands a control message to every sibling's Receiver,
// synchronously.
func (b *Memory) PublishControl(key string, data []byte) error {
	if !validControlKey(key) {
		return ErrBadTopic
	}
	b.each(func(r Receiver) { r.DeliverControl(key, data) })
	return nil
}

// PublishNotice hands a notice to every sibling's Receiver,
// synchronously.
func (b *Memory) PublishNotice(key string, data []byte) error {
	if !validControlKey(key) {
		return ErrBadTopic
	}
	b.each(func(r Receiver) { r.DeliverNotice(key, data) })
	return nil
}

// each calls f with every sibling's Receiver, in the broker's order.
func (b *Memory) each(f func(Receiver)) {
	if b.broker == nil {
		return
	}
	b.m.BusPublished.Inc()
	b.broker.mu.RLock()
	defer b.broker.mu.RUnlock()
	for _, sib := range b.broker.buses {
		if sib == b {
			continue
		}
		sib.mu.RLock()
		r := sib.recv
		sib.mu.RUnlock()
		if r != nil {
			sib.m.BusReceived.Inc()
			f(r)
		}
	}
}

func (b *Memory) Subscribe(string)   {}
func (b *Memory) Unsubscribe(string) {}
func (b *Memory) Degraded() bool     { return false }

func (b *Memory) Close() error {
	b.mu.Lock()
	b.recv = nil
	b.mu.Unlock()
	if b.broker != nil {
		b.broker.mu.Lock()
		for i, sib := range b.broker.buses {
			if sib == b {
				b.broker.buses = append(b.broker.buses[:i], b.broker.buses[i+1:]...)
				break
			}
		}
		b.broker.mu.Unlock()
	}
	return nil
}
