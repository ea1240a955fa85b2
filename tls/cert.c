/* SPDX-License-Identifier: MIT */
/*
 * tls/cert.c - corio_tls_cert_generate: fresh keys and certificates for
 * tests, examples and benchmarks, made with the OpenSSL API at run time
 * (so no private key is ever committed to the tree).
 */
#include "tls/internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

static int gen_fail(const char *what)
{
	char why[200];

	return corio__error(-EPROTO, "corio_tls_cert_generate: %s: %s", what,
			    corio__tls_reason(why, sizeof(why), "failed"));
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *e;
	int ok;

	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!e)
		return 0;
	ok = X509_add_ext(x, e, -1);
	X509_EXTENSION_free(e);
	return ok;
}

/* "localhost,127.0.0.1" -> "DNS:localhost,IP:127.0.0.1" */
static int san_value(const char *names, char *out, size_t len)
{
	size_t at = 0;

	for (const char *p = names; *p;) {
		const char *e = strchr(p, ',');
		int l = e ? (int)(e - p) : (int)strlen(p);
		char one[256];
		unsigned char a[16];
		int n;

		snprintf(one, sizeof(one), "%.*s", l, p);
		n = snprintf(out + at, len - at, "%s%s:%s", at ? "," : "",
			     inet_pton(AF_INET, one, a) == 1 || inet_pton(AF_INET6, one, a) == 1
				     ? "IP" : "DNS", one);
		if (l == 0 || n < 0 || (size_t)n >= len - at)
			return -1;
		at += (size_t)n;
		p += l + (e ? 1 : 0);
	}
	return at ? 0 : -1;
}

static int write_pem(const char *file, int mode, EVP_PKEY *key, X509 *x)
{
	int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	int ok;

	if (!f) {
		int err = -errno;

		if (fd >= 0)
			close(fd);
		return corio__error(err, "corio_tls_cert_generate: %s: %s", file, strerror(-err));
	}
	ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL)
		 : PEM_write_X509(f, x);
	if (fclose(f) != 0 || !ok)
		return corio__error(-EIO, "corio_tls_cert_generate: cannot write %s", file);
	return 0;
}

/* The signer: the CA's key and certificate, or NULL for self-signed. */
static int load_ca(const struct corio_tls_cert_gen *g, X509 **ca, EVP_PKEY **cakey)
{
	FILE *f;

	*ca = NULL;
	*cakey = NULL;
	if (!g->ca_cert_file)
		return 0;
	if (!g->ca_key_file)
		return corio__error(-EINVAL, "corio_tls_cert_generate: ca_key_file is NULL");
	if ((f = fopen(g->ca_cert_file, "re"))) {
		*ca = PEM_read_X509(f, NULL, NULL, NULL);
		fclose(f);
	}
	if ((f = fopen(g->ca_key_file, "re"))) {
		*cakey = PEM_read_PrivateKey(f, NULL, NULL, NULL);
		fclose(f);
	}
	if (!*ca || !*cakey)
		return gen_fail("cannot read the CA's certificate or key");
	return 0;
}

static int fill_cert(const struct corio_tls_cert_gen *g, X509 *x, EVP_PKEY *key, X509 *ca,
		     EVP_PKEY *cakey)
{
	char cn[256], san[1024];
	unsigned char serial[16];
	BIGNUM *bn;
	X509_NAME *name = X509_get_subject_name(x);
	int l = (int)strcspn(g->names, ",");

	snprintf(cn, sizeof(cn), "%.*s", l, g->names);
	if (san_value(g->names, san, sizeof(san)) < 0)
		return corio__error(-EINVAL, "corio_tls_cert_generate: bad names \"%s\"", g->names);
	RAND_bytes(serial, sizeof(serial));
	serial[0] &= 0x7f;
	bn = BN_bin2bn(serial, sizeof(serial), NULL);
	if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x))) {
		BN_free(bn);
		return gen_fail("serial");
	}
	BN_free(bn);
	X509_set_version(x, 2);
	X509_gmtime_adj(X509_getm_notBefore(x), -3600);
	X509_gmtime_adj(X509_getm_notAfter(x), 86400L * (g->days ? g->days : 1));
	X509_set_pubkey(x, key);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, ca ? X509_get_subject_name(ca) : name);
	if (!add_ext(x, ca ? ca : x, NID_subject_alt_name, san) ||
	    !add_ext(x, ca ? ca : x, NID_basic_constraints,
		     g->flags & CORIO_TLS_GEN_CA ? "critical,CA:TRUE" : "CA:FALSE") ||
	    !add_ext(x, ca ? ca : x, NID_key_usage,
		     g->flags & CORIO_TLS_GEN_CA ? "critical,keyCertSign,cRLSign"
						 : "critical,digitalSignature,keyEncipherment") ||
	    !add_ext(x, ca ? ca : x, NID_subject_key_identifier, "hash") ||
	    (ca && !add_ext(x, ca, NID_authority_key_identifier, "keyid:always")))
		return gen_fail("extensions");
	if (!X509_sign(x, cakey ? cakey : key, EVP_sha256()))
		return gen_fail("signing");
	return 0;
}

static int gen_check(const struct corio_tls_cert_gen *g)
{
	if (!g || !g->cert_file || !g->key_file || !g->names || !g->names[0])
		return corio__error(-EINVAL, "corio_tls_cert_generate: cert_file, key_file and "
					     "names are needed");
	if (g->key_type > CORIO_TLS_KEY_RSA2048 || (g->flags & ~CORIO_TLS_GEN_CA))
		return corio__error(-EINVAL, "corio_tls_cert_generate: unknown key_type or flags");
	for (unsigned i = 0; i < sizeof(g->reserved) / sizeof(g->reserved[0]); i++)
		if (g->reserved[i])
			return corio__error(-EINVAL, "corio_tls_cert_generate: reserved fields "
						     "must be zero");
	return 0;
}

int corio_tls_cert_generate(const struct corio_tls_cert_gen *g)
{
	EVP_PKEY *key = NULL, *cakey = NULL;
	X509 *x = NULL, *ca = NULL;
	int ret = gen_check(g);

	if (ret)
		return ret;
	ERR_clear_error();
	if ((ret = load_ca(g, &ca, &cakey)) < 0)
		goto out;
	key = g->key_type == CORIO_TLS_KEY_RSA2048 ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
	if (!key || !(x = X509_new())) {
		ret = gen_fail("key generation");
		goto out;
	}
	if ((ret = fill_cert(g, x, key, ca, cakey)) < 0 ||
	    (ret = write_pem(g->key_file, 0600, key, NULL)) < 0 ||
	    (ret = write_pem(g->cert_file, 0644, NULL, x)) < 0)
		goto out;
out:
	X509_free(x);
	X509_free(ca);
	EVP_PKEY_free(key);
	EVP_PKEY_free(cakey);
	return ret;
}
