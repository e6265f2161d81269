/*
 * A reference broker for benchmarks only: librdkafka's own in-memory mock cluster, run as a
 * process of its own on a loopback port, so that `rdkafka_performance` talks to it over TCP exactly
 * as it talks to Strom.  It is written in C and keeps records in memory, which makes it a measure of
 * what the client and the machine allow when the broker costs almost nothing.
 *
 * Usage: mock_broker TOPIC:PARTITIONS [TOPIC:PARTITIONS ...]
 * Prints the bootstrap address on the first line of stdout, then serves until stdin is closed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdkafka.h"
#include "rdkafka_mock.h"

int main(int argc, char **argv) {
        char errstr[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_t *rk;
        rd_kafka_mock_cluster_t *mcluster;
        char buf[64];
        int i;

        if (argc < 2) {
                fprintf(stderr, "usage: %s TOPIC:PARTITIONS ...\n", argv[0]);
                return 2;
        }
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!rk) {
                fprintf(stderr, "rd_kafka_new: %s\n", errstr);
                return 1;
        }
        mcluster = rd_kafka_mock_cluster_new(rk, 1);
        if (!mcluster) {
                fprintf(stderr, "rd_kafka_mock_cluster_new failed\n");
                return 1;
        }
        for (i = 1; i < argc; i++) {
                char *spec = strdup(argv[i]);
                char *colon = strchr(spec, ':');
                rd_kafka_resp_err_t err;
                if (!colon) {
                        fprintf(stderr, "bad topic spec %s (want TOPIC:PARTITIONS)\n", argv[i]);
                        return 2;
                }
                *colon = '\0';
                err = rd_kafka_mock_topic_create(mcluster, spec, atoi(colon + 1), 1);
                if (err) {
                        fprintf(stderr, "topic %s: %s\n", spec, rd_kafka_err2str(err));
                        return 1;
                }
                free(spec);
        }
        printf("%s\n", rd_kafka_mock_cluster_bootstraps(mcluster));
        fflush(stdout);
        while (fgets(buf, sizeof(buf), stdin) != NULL)
                ;
        rd_kafka_mock_cluster_destroy(mcluster);
        rd_kafka_destroy(rk);
        return 0;
}
