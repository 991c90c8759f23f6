#ifndef OPS_H
#define OPS_H

long parse_number(const char *text);
int apply(char op, long a, long b, long *out);

#endif
