import FolderSync
import Foundation

/// The diagnosis as a person reads it: each store, each device, then the findings with what to do.
struct DoctorText {
    var diagnosis: ContainerDiagnosis
    var local: LocalStoreSummary?

    func print() {
        Output.data("Container \(diagnosis.container) (diagnosed \(Output.timestamp(diagnosis.date)))")
        for store in diagnosis.stores { describe(store) }
        let findings = diagnosis.findings
        Output.data("")
        if findings.isEmpty {
            Output.data("No findings: the container looks healthy.")
            return
        }
        Output.data("Findings (\(summary)):")
        for finding in findings {
            let scope = [finding.store, finding.device].compactMap { $0 }.joined(separator: "/")
            Output.data(
                "  \(finding.severity.rawValue.uppercased()) \(finding.code)\(scope.isEmpty ? "" : " [\(scope)]")"
            )
            if let path = finding.path { Output.data("    file: \(path)") }
            Output.data("    \(finding.message)")
            Output.data("    what to do: \(finding.advice)")
        }
    }

    var summary: String {
        DiagnosisSeverity.allCases.reversed().compactMap { severity in
            let count = diagnosis.findings.filter { $0.severity == severity }.count
            guard count > 0 else { return nil }
            let word = severity == .info ? "note" : severity.rawValue
            return "\(count) \(word)\(count == 1 ? "" : "s")"
        }.joined(separator: ", ")
    }

    private func describe(_ store: StoreFolderDiagnosis) {
        Output.data("")
        Output.data("Store \(store.name) (\(store.path))")
        Output.data("  sentinel: \(store.sentinel), \(store.registrations.count) registered")
        Output.data(
            "  container identity: \(store.containerIDs.isEmpty ? "none" : store.containerIDs.joined(separator: ", "))"
        )
        for device in store.devices { describe(device) }
        for skew in store.clockSkews {
            Output.data(
                "  clock: \(skew.behind) behind \(skew.ahead) by at least \(String(format: "%.1f", skew.seconds)) s"
            )
        }
        if let state = store.local { describe(state) }
    }

    private func describe(_ device: DeviceDiagnosis) {
        var line = "  device \(device.device): "
        if let registration = device.registration {
            line += "registered \(Output.timestamp(registration.registered))"
            if let host = registration.host { line += " on \(host)" }
            if let version = registration.schemaVersion { line += ", schema \(version)" }
        } else {
            line += device.acknowledgement?.left == true ? "left" : "not registered"
        }
        Output.data(line)
        var logs = "    logs: \(device.logCount)"
        if let first = device.firstLog, let last = device.lastLog { logs += " (\(first)–\(last))" }
        if !device.gaps.isEmpty { logs += ", missing \(ranges(device.gaps))" }
        if !device.schemaVersions.isEmpty {
            logs += ", schema \(device.schemaVersions.map(String.init).joined(separator: ","))"
        }
        if !device.formatVersions.isEmpty {
            logs += ", format \(device.formatVersions.map(String.init).joined(separator: ","))"
        }
        if let created = device.newestLogCreated { logs += ", newest created \(Output.timestamp(created))" }
        Output.data(logs)
        let problems = [
            (device.damaged.count, "damaged"), (device.unsupported.count, "newer format"),
            (device.temporaries.count, "temporary"),
            (device.conflictCopies.count, "conflict copies"), (device.unrecognized.count, "unrecognized"),
        ].filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        if !problems.isEmpty { Output.data("    other files: \(problems.joined(separator: ", "))") }
        if let acknowledgement = device.acknowledgement {
            let applied = acknowledgement.applied.sorted { $0.key < $1.key }.map { "\($0.key)@\($0.value)" }
            let committed = acknowledgement.committed.map { ", committed \($0)" } ?? ""
            Output.data("    applied: \(applied.isEmpty ? "nothing" : applied.joined(separator: " "))\(committed)")
        }
        for (owner, sequences) in device.requests.sorted(by: { $0.key < $1.key }) {
            Output.data("    asks \(owner) for \(ranges(sequences))")
        }
        for baseline in device.baselines {
            let covers = baseline.covers.sorted { $0.key < $1.key }.map { "\($0.key)@\($0.value)" }.joined(
                separator: " "
            )
            Output.data(
                "    baseline: covers \(covers), \(baseline.changes) changes, \(baseline.tombstones) tombstones"
            )
        }
    }

    private func describe(_ state: LocalStoreState) {
        var line = "  local store"
        if let local { line += " \(local.path) (\(local.type))" }
        line += ": device \(state.device ?? "none"), schema \(state.schemaVersion)"
        if !state.marks.isEmpty { line += ", \(state.marks.joined(separator: ", "))" }
        Output.data(line)
        let applied = state.applied.sorted { $0.key < $1.key }.map { "\($0.key)@\($0.value)" }.joined(separator: " ")
        Output.data("    applied: \(applied.isEmpty ? "nothing" : applied)")
        for (device, sequences) in state.pending.sorted(by: { $0.key < $1.key }) {
            Output.data("    pending from \(device): \(ranges(sequences))")
        }
        Output.data(
            "    committed: \(state.committed.map(String.init) ?? "none"), outbox \(state.outbox), tombstones "
                + "\(state.tombstones)"
        )
    }

    /// `1–3, 7, 9–12`.
    func ranges(_ values: [UInt64]) -> String {
        var parts: [String] = []
        var start: UInt64?
        var previous: UInt64 = 0
        for value in values.sorted() {
            if let first = start, value == previous + 1 {
                previous = value
                _ = first
                continue
            }
            if let first = start { parts.append(first == previous ? "\(first)" : "\(first)–\(previous)") }
            start = value
            previous = value
        }
        if let first = start { parts.append(first == previous ? "\(first)" : "\(first)–\(previous)") }
        return parts.joined(separator: ", ")
    }
}
