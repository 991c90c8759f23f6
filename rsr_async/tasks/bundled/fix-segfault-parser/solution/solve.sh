#!/bin/bash
set +H
cd /app/ledger
make && ./ledger transactions.csv | head
cat > ledger.c <<'EOF'
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct account {
    char *name;
    long total;
};

static struct account *accounts = NULL;
static size_t count = 0, capacity = 0;

static struct account *find(const char *name) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(accounts[i].name, name) == 0)
            return &accounts[i];
    if (count == capacity) {
        capacity = capacity ? capacity * 2 : 16;
        accounts = realloc(accounts, capacity * sizeof *accounts);
        if (accounts == NULL) { perror("realloc"); exit(1); }
    }
    accounts[count].name = strdup(name);
    accounts[count].total = 0;
    return &accounts[count++];
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: ledger FILE\n"); return 2; }
    FILE *f = fopen(argv[1], "r");
    if (f == NULL) { perror(argv[1]); return 1; }
    char *line = NULL;
    size_t size = 0;
    long number = 0;
    ssize_t len;
    while ((len = getline(&line, &size, f)) >= 0) {
        number++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0) continue;
        char *comma = strchr(line, ',');
        if (comma == NULL) { fprintf(stderr, "skipped line %ld\n", number); continue; }
        *comma = '\0';
        find(line)->total += atol(comma + 1);
    }
    for (size_t i = 0; i < count; i++)
        printf("%s %ld\n", accounts[i].name, accounts[i].total);
    free(line);
    fclose(f);
    return 0;
}
EOF
make && ./ledger transactions.csv > totals.txt
cat totals.txt
cd /app
