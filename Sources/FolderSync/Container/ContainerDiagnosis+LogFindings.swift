import Foundation

/// The findings about one device's logs.
extension FindingsBuilder {
    /// One device's logs: gaps, damaged and unsupported files, an acknowledgement ahead of them.
    /// A gap or a damaged log that no registered device still needs is a note, not a problem.
    mutating func logs(of device: DeviceDiagnosis) {
        let name = device.device
        gaps(of: device)
        damaged(of: device)
        for file in device.unsupported {
            add(
                .problem,
                "log.unsupported",
                device: name,
                path: file.path,
                file.reason,
                "A newer version of Concord wrote it: upgrade the app on the devices that cannot read it."
            )
        }
        if let exported = device.acknowledgement?.applied[name], exported > (device.lastLog ?? 0),
            exported > (ContainerDiagnosis.baselineFloors(reading)[name] ?? 0)
        {
            add(
                .warning,
                "log.notArrived",
                device: name,
                path: layout.deviceFolder(name).path,
                "\(name) says it exported through log \(exported); the container has through "
                    + "\(device.lastLog ?? 0)",
                "The sync engine has not delivered them yet (check that it runs and is not paused), or they were "
                    + "deleted: \(name) publishes missing logs again when another device asks for them."
            )
        }
    }

    /// One device's missing logs (the first 20 named): a problem, unless no registered device
    /// needs them.
    private mutating func gaps(of device: DeviceDiagnosis) {
        let name = device.device
        for sequence in device.gaps.prefix(20) {
            if let covered = coverage(of: name, sequence) {
                add(
                    .info,
                    "log.gap",
                    device: name,
                    path: layout.logURL(device: name, sequence: sequence).path,
                    "\(name)'s log \(sequence) is missing, but no registered device needs it: \(covered)",
                    "Covered: nothing to do. A device that joins later starts from a baseline or asks \(name) for it."
                )
                continue
            }
            add(
                .problem,
                "log.gap",
                device: name,
                path: layout.logURL(device: name, sequence: sequence).path,
                "\(name)'s log \(sequence) is missing; its later logs wait behind it on every device that has "
                    + "not applied it",
                ContainerDiagnosis.repair(owner: name, sequence: sequence, registered: registered, left: left)
            )
        }
        if device.gaps.count > 20 {
            add(
                .problem,
                "log.gap",
                device: name,
                "\(device.gaps.count - 20) more of \(name)'s logs are missing",
                "See the gaps listed in the device's section."
            )
        }
    }

    /// One device's damaged files: still arriving, covered (no registered device needs the log),
    /// or a problem its owner heals.
    private mutating func damaged(of device: DeviceDiagnosis) {
        let name = device.device
        for file in device.damaged {
            let arriving = file.reason.hasPrefix("still arriving?")
            let isLog = file.path.hasSuffix("." + ContainerLayout.logExtension)
            if isLog, !arriving,
                case .log(let sequence) = ContainerLayout.classify(
                    fileName: URL(fileURLWithPath: file.path).lastPathComponent
                ), let covered = coverage(of: name, sequence)
            {
                add(
                    .info,
                    "log.damaged",
                    device: name,
                    path: file.path,
                    "\(file.reason); no registered device needs it: \(covered)",
                    "Covered: safe to delete (keep it aside if you want to inspect it with `concord log`)."
                )
                continue
            }
            add(
                arriving ? .info : (isLog ? .problem : .warning),
                isLog ? "log.damaged" : "file.damaged",
                device: name,
                path: file.path,
                file.reason,
                arriving
                    ? "The sync engine may still be writing it: look again in a minute."
                    : isLog
                        ? "Devices that cannot read it ask \(name) for it (requests.json); \(name) publishes it "
                            + "again from its store on its next sync. Keep the damaged file aside if you want to "
                            + "inspect it (`concord log`)."
                        : "It is rewritten on \(name)'s next sync; move it aside if it stays unreadable."
            )
        }
    }
}
