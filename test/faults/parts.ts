// The parts of the fault suite, in the order they run. A new part is a file exporting a FaultPart
// (see lib/part.ts) and one line here.

import type { FaultPart } from './lib/part.js'
import { fuzz } from './fuzz.js'
import { hostile } from './hostile.js'
import { outage } from './outage.js'
import { soak } from './soak.js'

export const PARTS: FaultPart[] = [
  fuzz,
  hostile,
  outage,
  soak,
]
