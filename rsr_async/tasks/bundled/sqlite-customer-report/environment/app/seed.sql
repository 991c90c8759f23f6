CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                     status TEXT NOT NULL, placed_at TEXT);
CREATE TABLE order_items (order_id INTEGER REFERENCES orders(id), product TEXT,
                          quantity INTEGER, price REAL);
INSERT INTO customers VALUES (1,'Alice'),(2,'Bob'),(3,'Chen'),(4,'Dana'),(5,'Eve');
INSERT INTO orders VALUES (10,1,'shipped','2024-01-02'),(11,1,'shipped','2024-01-09'),
  (12,2,'shipped','2024-01-03'),(13,2,'cancelled','2024-01-04'),(14,3,'shipped','2024-01-05'),
  (15,3,'pending','2024-01-06'),(16,3,'shipped','2024-01-07'),(17,4,'cancelled','2024-01-08'),
  (18,4,'cancelled','2024-01-10'),(19,5,'shipped','2024-01-11'),(20,5,'shipped','2024-01-12');
INSERT INTO order_items VALUES (10,'pen',3,1.5),(10,'pad',1,4.25),(11,'ink',2,7.0),
  (12,'pen',10,1.5),(13,'desk',1,199.0),(14,'lamp',1,35.5),(15,'bulb',4,2.25),
  (16,'pen',2,1.5),(17,'chair',2,89.0),(18,'pen',1,1.5),(19,'pad',2,4.25),(20,'ink',1,7.0),
  (20,'pen',1,1.5);
