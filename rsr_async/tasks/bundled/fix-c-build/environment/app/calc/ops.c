#include "ops.h"

int apply(char op, long a, long b, long *out) {
    switch (op) {
    case '+': *out = a + b; break;
    case '-': *out = b - a; break;
    case '*': *out = a * b; break;
    case '/': *out = a / b; break;
    case '%': if (b == 0) return 1; *out = a % b; break;
    default: return 2;
    }
    return 0;
}
