#!/bin/bash
cd /app/calc
make
grep -n 'calc:' Makefile
sed -i 's/^calc: main.o parse.o$/calc: main.o parse.o ops.o/' Makefile
sed -i 's/\*out = b - a;/*out = a - b;/' ops.c
sed -i "s|case '/': \*out = a / b; break;|case '/': if (b == 0) return 1; *out = a / b; break;|" ops.c
make clean
make
./calc 7 - 10; ./calc 2 '*' 21; ./calc 5 / 0
cd /app
