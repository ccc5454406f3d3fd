package publishrate

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/pressure"
)

// TestMergedViewChoiceMatchesModel: whatever views arrive (any epoch, ts
// around the receiver's clock, replays), the clock moving and local
// samples in between, the view held is the model's: the first one, then
// one from a higher epoch, or the same epoch and a newer ts, until the
// held one is staleAfter old, when any is taken; RateOf is the held
// view's rate, or the own rate if higher, and the own rate alone without
// a view; the instances gauge is the view's count minus one.
func TestMergedViewChoiceMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clk := testkit.NewClock(testEpoch)
		local := newFakeLocal()
		a := newOffline(t, local, Options{Mode: ModeMerged}, Deps{now: clk.Now})
		type held struct {
			epoch, ts int64
			arrived   time.Time
			rate      float64
			instances int
		}
		var model *held
		own := 0.0
		expire := func() {
			if model != nil && clk.Now().Sub(model.arrived) >= DefaultStaleAfter {
				model = nil
			}
		}
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				epoch := rapid.Int64Range(1, 4).Draw(rt, "epoch")
				ts := clk.Now().UnixMilli() + rapid.Int64Range(-2000, 2000).Draw(rt, "skew")
				rate := float64(rapid.IntRange(1, 1000).Draw(rt, "rate"))
				inst := rapid.IntRange(1, 9).Draw(rt, "instances")
				b, err := marshalEnvelope(&envelope{V: viewVersion, InstanceID: "M", TS: ts, Epoch: epoch, Instances: inst,
					Slice: []wireTopic{{"hot", rate, 1, 1}}}, nil)
				if err != nil {
					rt.Fatal(err)
				}
				a.receiveView(string(b))
				expire()
				if model == nil || epoch > model.epoch || epoch == model.epoch && ts > model.ts {
					model = &held{epoch, ts, clk.Now(), rate, inst}
				}
			case 1:
				clk.Advance(rapid.SampledFrom([]time.Duration{0, time.Second, 5 * time.Second, DefaultStaleAfter}).Draw(rt, "advance"))
				continue // nothing merges until the next event
			case 2:
				own = float64(rapid.IntRange(0, 1000).Draw(rt, "own"))
				local.emit(&pressure.Snapshot{TopTopics: []pressure.TopicRate{{Topic: "hot", MessagesPerSec: own}}})
				expire()
			}
			want, wantInst := own, 0
			if model != nil {
				want, wantInst = max(model.rate, own), model.instances-1
			}
			if got, inst := a.RateOf("hot"), a.Stats().Instances; got != want || inst != wantInst {
				rt.Fatalf("RateOf = %v, instances %d; model %+v, own %v: want %v and %d", got, inst, model, own, want, wantInst)
			}
		}
	})
}

// TestBestKIsSortAndCut: bestK keeps exactly what sorting everything and
// cutting to k keeps, in the same order.
func TestBestKIsSortAndCut(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		k := rapid.IntRange(0, 8).Draw(rt, "k")
		vals := rapid.SliceOf(rapid.IntRange(0, 20)).Draw(rt, "values")
		better := func(x, y wireSub) bool { return x.Count > y.Count || x.Count == y.Count && x.Topic < y.Topic }
		b := bestK[wireSub]{k: k, better: better}
		var all []wireSub
		for i, v := range vals {
			s := wireSub{Topic: string(rune('a' + i%26)), Count: v}
			if slices.ContainsFunc(all, func(o wireSub) bool { return o == s }) {
				continue // a strict order: no two equal
			}
			all = append(all, s)
			b.offer(s)
		}
		slices.SortFunc(all, func(x, y wireSub) int {
			if better(x, y) {
				return -1
			}
			return 1
		})
		if want := all[:min(k, len(all))]; !slices.Equal(b.sorted(), want) {
			rt.Fatalf("bestK kept %v, want %v", b.sorted(), want)
		}
	})
}
