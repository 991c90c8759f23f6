#!/bin/bash
set -euo pipefail
mkdir -p /srv/site/css /srv/site/img/icons /srv/site/cgi-bin /srv/site/private/keys
echo "<h1>hi</h1>" > /srv/site/index.html
echo "body{}" > /srv/site/css/main.css
echo png > /srv/site/img/logo.png; echo ico > /srv/site/img/icons/fav.ico
printf '#!/bin/sh\necho ok\n' > /srv/site/cgi-bin/status.cgi
printf '#!/bin/sh\necho hi\n' > /srv/site/cgi-bin/hello.cgi
echo "k" > /srv/site/private/keys/server.key; echo "p" > /srv/site/private/passwords.txt
chmod -R 777 /srv/site
chmod 000 /srv/site/img/logo.png /srv/site/cgi-bin/hello.cgi
chmod 644 /srv/site/private/keys
find /srv/site -type f -exec md5sum {} + | sort > /root/.site.md5
