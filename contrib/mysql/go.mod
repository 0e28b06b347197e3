module github.com/lameduck/lameduck/contrib/mysql

go 1.26

replace github.com/lameduck/lameduck => ../..

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/lameduck/lameduck v0.0.0
	go.uber.org/goleak v1.3.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
