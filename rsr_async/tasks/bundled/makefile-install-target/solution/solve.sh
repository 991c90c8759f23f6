#!/bin/bash
cd /app/wordcount
cat Makefile
printf '%s\n' '' 'PREFIX ?= /usr/local' 'DESTDIR ?=' '' 'install: $(PROG)' >> Makefile
printf '\t%s\n' 'install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/doc/wordcount' 'install -m 755 $(PROG) $(DESTDIR)$(PREFIX)/bin/$(PROG)' 'install -m 644 wordcount.1 $(DESTDIR)$(PREFIX)/share/man/man1/wordcount.1' 'install -m 644 README $(DESTDIR)$(PREFIX)/share/doc/wordcount/README' >> Makefile
printf '%s\n' '' 'uninstall:' >> Makefile
printf '\t%s\n' 'rm -f $(DESTDIR)$(PREFIX)/bin/$(PROG) $(DESTDIR)$(PREFIX)/share/man/man1/wordcount.1 $(DESTDIR)$(PREFIX)/share/doc/wordcount/README' >> Makefile
printf '%s\n' '' '.PHONY: install uninstall' >> Makefile
make install DESTDIR=/tmp/stage PREFIX=/usr && find /tmp/stage -type f
rm -rf /tmp/stage
cd /app
