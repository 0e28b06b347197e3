package ldfiberv3_test

import (
	"testing"

	"github.com/lameduck/lameduck/contrib/internal/fasthttptest"
)

func TestProbesAreNotApplicationRequestsOnFiber(t *testing.T) {
	fasthttptest.ProbesAreNotApplicationRequests(t, server)
}
