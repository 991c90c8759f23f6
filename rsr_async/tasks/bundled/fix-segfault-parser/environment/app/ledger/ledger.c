#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ACCOUNTS 64

struct account {
    char name[16];
    long total;
};

static struct account accounts[MAX_ACCOUNTS];
static int count = 0;

static struct account *find(const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(accounts[i].name, name) == 0)
            return &accounts[i];
    strcpy(accounts[count].name, name);
    accounts[count].total = 0;
    return &accounts[count++];
}

int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "r");
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *comma = strchr(line, ',');
        *comma = '\0';
        find(line)->total += atol(comma + 1);
    }
    for (int i = 0; i < count; i++)
        printf("%s %ld\n", accounts[i].name, accounts[i].total);
    return 0;
}
