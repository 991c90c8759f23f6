#!/bin/bash
cd /app
sqlite3 shop.db '.schema'
sqlite3 shop.db "select distinct status from orders"
sqlite3 -header -csv shop.db "select c.name as name, count(distinct o.id) as orders, printf('%.2f', sum(i.quantity * i.price)) as total from customers c join orders o on o.customer_id = c.id join order_items i on i.order_id = o.id where o.status <> 'cancelled' group by c.id having count(distinct o.id) >= 2 order by sum(i.quantity * i.price) desc" > repeat_customers.csv
cat repeat_customers.csv
