#include <stdio.h>
#include <ctype.h>

int main(void) {
    long words = 0; int in_word = 0, c;
    while ((c = getchar()) != EOF) {
        if (isspace(c)) in_word = 0;
        else if (!in_word) { in_word = 1; words++; }
    }
    printf("%ld\n", words);
    return 0;
}
