#include <stdlib.h>
#include "ops.h"

long parse_number(const char *text) {
    return strtol(text, NULL, 10);
}
