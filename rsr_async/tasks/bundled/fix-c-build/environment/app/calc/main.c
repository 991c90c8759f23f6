#include <stdio.h>
#include <stdlib.h>
#include "ops.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: calc A OP B\n");
        return 2;
    }
    long a = parse_number(argv[1]);
    long b = parse_number(argv[3]);
    long result;
    if (apply(argv[2][0], a, b, &result) != 0) {
        fprintf(stderr, "error: division by zero\n");
        return 1;
    }
    printf("%ld\n", result);
    return 0;
}
