module example.com/shop/web

go 1.26
