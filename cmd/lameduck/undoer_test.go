package main

import (
	"errors"
	"slices"
	"testing"
)

// An open function's undos run, last first, when it fails, including the
// steps it recorded after deferring onError; none runs when it succeeds.
func TestUndoerRunsOnErrorLastFirst(t *testing.T) {
	for _, fail := range []bool{true, false} {
		var ran []int
		open := func() (err error) {
			var undo undoer
			defer undo.onError(&err)
			undo = append(undo, func() { ran = append(ran, 1) })
			undo = append(undo, func() { ran = append(ran, 2) })
			if fail {
				return errors.New("the third step failed")
			}
			return nil
		}
		_ = open()
		want := []int{2, 1}
		if !fail {
			want = nil
		}
		if !slices.Equal(ran, want) {
			t.Errorf("fail=%v: undos ran %v; want %v", fail, ran, want)
		}
	}
}
