module github.com/lameduck/lameduck/contrib/internal

go 1.26

replace github.com/lameduck/lameduck => ../..

require github.com/lameduck/lameduck v0.0.0
