module github.com/lameduck/lameduck/contrib/fx

go 1.26.0

replace github.com/lameduck/lameduck => ../..

require (
	github.com/lameduck/lameduck v0.0.0
	go.uber.org/fx v1.24.0
	go.uber.org/goleak v1.3.0
)

require (
	go.uber.org/dig v1.19.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.26.0 // indirect
	golang.org/x/sys v0.0.0-20220412211240-33da011f77ad // indirect
)
